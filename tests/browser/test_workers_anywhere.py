"""Workers anywhere, end to end with real processes: the web server and the supervisor keep their workspaces root,
the worker keeps its own, and no directory is shared.

A file-changing run on the worker, a person's edit on the worker's disk, the
continuation refused by the worker's check with that file and its diff, a
reconcile an admin confirms in the browser and the worker performs, and the
continuation running to the end — while an audit hook in the server and
supervisor processes (tests/audit_site) logs any open, listing or write under
the worker's root: the log must stay empty.
"""

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from django.utils import timezone
from playwright.sync_api import expect

from tasks.models import Run, Task
from tests.browser.pages import expect_live
from tests.factories import user_token, worker_token
from tests.processes import ROOT, Server, child_env, manage, start_worker, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

AUDIT = ROOT / "tests" / "audit_site"
PLAN = [
    {"tool": "file_write", "args": {"path": "draft.md", "content": "first draft\n"}},
    {"tool": "sleep", "args": {"seconds": 0}},
    {"tool": "file_write", "args": {"path": "summary.md", "content": "done\n"}},
]


def audited(forbidden: Path, log: Path, **env) -> dict:
    return {"PYTHONPATH": str(AUDIT), "CONSOLE_TEST_FORBIDDEN_ROOT": str(forbidden),
            "CONSOLE_TEST_FORBIDDEN_LOG": str(log), **env}  # fmt: skip


def supervise(server_env: dict) -> None:
    manage("supervise", "--once", env=child_env(**server_env))


def serve(server, token, **env) -> subprocess.Popen:
    """A long-running `manage.py worker` (it takes runs and repair jobs as they come)."""
    env = child_env(CONSOLE_URL=server.url, CONSOLE_WORKER_TOKEN=token, CONSOLE_HEARTBEAT_SECONDS=1,
                    CONSOLE_LEASE_SECONDS=3, **env)  # fmt: skip
    return subprocess.Popen([sys.executable, "manage.py", "worker", "--label", "pod-a", "--poll", "0.3"], cwd=ROOT,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip


def test_the_server_never_opens_the_workers_disk_and_the_worker_validates_and_repairs(
    page, sign_in, org, agent, admin_user, tmp_path
):
    server_root, worker_root = tmp_path / "server-workspaces", tmp_path / "worker-workspaces"
    server_root.mkdir()
    worker_root.mkdir()
    log = tmp_path / "opened-under-worker-root.log"
    server_env = audited(worker_root, log, CONSOLE_WORKSPACES=server_root)
    # The check can fail: a process with the hook that opens a file under the worker's root is logged.
    probe = worker_root / "probe.txt"
    probe.write_text("x")
    subprocess.run([sys.executable, "-c", f"open({str(probe)!r}).read()"], env=child_env(**server_env), check=True)
    assert "open" in log.read_text()
    probe.unlink()
    log.unlink()

    server = Server(CONSOLE_LEASE_SECONDS=3, CONSOLE_HEARTBEAT_SECONDS=1, **server_env).start()
    worker_env = {"CONSOLE_WORKER_WORKSPACES": worker_root, "CONSOLE_WORKER_WORKSPACES_LABEL": "pod-a",
                  "CONSOLE_WORKSPACES": tmp_path / "nowhere"}  # fmt: skip
    token = worker_token(org, "w1")
    workers = []
    try:
        api = user_token(admin_user)
        created = httpx.post(
            f"{server.url}/api/tasks/",
            json={"title": "Draft the notes", "agent": agent.name, "input": {"steps": PLAN}},
            headers={"Authorization": f"Token {api}"},
        )
        assert created.status_code == 201, created.text
        task = Task.objects.get(pk=created.json()["id"])

        # The first run writes draft.md on the worker's disk, then the worker dies at step 2.
        first = start_worker(server, token, "crash_after_dispatch:2", label="pod-a", **worker_env)
        first.communicate(timeout=60)
        workspace = worker_root / org.slug / f"task-{task.pk}"
        assert (workspace / "draft.md").read_text() == "first draft\n"
        assert not (server_root / org.slug / f"task-{task.pk}" / "draft.md").exists()
        run = Run.objects.filter(task=task).order_by("id").first()
        wait_for(lambda: Run.objects.get(pk=run.pk).lease_expires_at < timezone.now(), timeout=10,
                 what="the lease to lapse")  # fmt: skip
        supervise(server_env)  # interrupted: a replay-safe step was cut off, the continuation is queued

        # A person edits the draft on the worker's disk; the worker's check refuses the continuation.
        (workspace / "draft.md").write_text("first draft\nedited by hand\n")
        st = (workspace / "draft.md").stat()
        os.utime(workspace / "draft.md", ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
        workers.append(serve(server, token, **worker_env))
        wait_for(lambda: Run.objects.filter(task=task, error_code="workspace_validation_failed").exists(),
                 timeout=30, what="the worker's refusal")  # fmt: skip
        refused = Run.objects.get(task=task, error_code="workspace_validation_failed")
        assert refused.started_at is None

        sign_in(page, "ada")
        page.goto(f"{server.url}/tasks/{task.pk}/")
        expect_live(page)
        action = refused.actions.get(kind="workspace_validation")
        card = page.locator(f"#action-{action.pk}")
        expect(card).to_contain_text("Workspace changed — 1 file differs")
        card.get_by_text("diff of draft.md").click()
        expect(card.locator("pre.diff")).to_contain_text("+edited by hand")
        expect(page.locator(f"#workspace-{task.pk}")).to_contain_text("the server does not read it")

        card.get_by_text("Reconcile…").click()
        card.get_by_role("button", name="Confirm reconcile").click()
        card = page.locator(f"#action-{action.pk}")
        # The worker takes the job and reports file by file; the card shows the reported result.
        expect(card).to_contain_text("1 adopted into the manifest", timeout=30_000)
        expect(card.locator(".badge").first).to_have_text("Repaired")

        # The hold is lifted: the supervisor continues the run, the worker's check passes and the plan finishes.
        supervise(server_env)
        wait_for(lambda: Task.objects.get(pk=task.pk).status == "done", timeout=60, what="the task to finish")
        assert (workspace / "draft.md").read_text() == "first draft\nedited by hand\n"
        assert (workspace / "summary.md").read_text() == "done\n"
        state = page.request.get(f"{server.url}/api/tasks/{task.pk}/workspace/").json()
        assert state["path_is"] == "worker" and state["path"] == str(workspace)
        assert {f["path"] for f in state["files"]} == {"draft.md", "summary.md"}
    finally:
        for w in workers:
            w.terminate()
            w.wait(20)
        server.stop()
    assert not log.exists(), "the server or supervisor opened the worker's files:\n" + log.read_text()
