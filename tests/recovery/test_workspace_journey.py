"""Workspaces through real processes: a worker killed mid-run, a hand edit, an admin's reconcile over HTTP,
and the continuation a real worker runs on the newer content; and an export that fails, then succeeds."""

import signal
from pathlib import Path

import pytest

from recovery.models import RecoveryAction
from recovery.supervisor.loop import supervise_once
from tasks.models import Run, Step
from tasks.services import task_create
from tests.conftest import token_client
from tests.factories import user_token, worker_token
from tests.helpers import plan
from tests.processes import lapse_and_supervise, run_worker
from tests.recovery.workdisk import edit_by_hand, sha

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_hand_edit_after_a_crash_is_reconciled_and_a_real_worker_continues_on_it(
    daphne_server, org, agent, admin_user
):
    token = worker_token(org)
    task = task_create(
        org=org,
        actor="t",
        title="draft",
        agent="builder",
        input=plan(
            ("file_write", {"path": "draft.md", "content": "first draft\n"}),
            ("bash", {"command": "echo '- item' >> list.md"}),
            ("sleep", {"seconds": 1}),
            ("file_read", {"path": "draft.md"}),
            ("bash", {"command": "cat list.md"}),
        ),
    )
    code, out = run_worker(daphne_server, token, fault="crash_after_dispatch:3@1")
    assert code == -signal.SIGKILL, out
    first = Run.objects.get(task=task)
    manifest = {r.path: r for r in task.workspace_files.all()}
    assert manifest["draft.md"].sha256 == sha("first draft\n") and manifest["list.md"].tool == "bash"
    edit_by_hand(task, "draft.md", "first draft\nand a person's paragraph\n")
    report = lapse_and_supervise(first)
    action = RecoveryAction.objects.get(task=task, kind="workspace_validation")
    assert report.opened == [action.pk] and report.continued == []
    assert "+and a person's paragraph" in action.evidence["files"][0]["diff"]

    admin = token_client(user_token(admin_user))
    page = admin.get(f"/api/actions/{action.pk}/").json()
    r = admin.post(
        f"/api/actions/{action.pk}/repair/",
        {"version": page["version"], "repair": "reconcile", "run": page["run"]},
        format="json",
    )
    assert r.status_code == 202, r.content
    assert r.json()["result"]["counts"]["adopted"] == 1 and r.json()["action"]["status"] == "resolved"

    report = supervise_once()
    assert len(report.continued) == 1
    code, out = run_worker(daphne_server, token)
    assert code == 0, out
    cont = Run.objects.get(pk=report.continued[0])
    assert cont.status == "succeeded" and cont.continues_id == first.pk
    read = Step.objects.get(run=cont, seq=4).result["content"]
    assert read == "first draft\nand a person's paragraph\n"
    assert Step.objects.get(run=cont, seq=5).result["stdout"] == "- item\n"  # bash step 2 was reused, not rerun
    assert (Path(task.workspace) / "draft.md").read_text() == read


def test_an_export_that_fails_is_retried_by_an_admin_once_fixed(
    daphne_server, org, agent, admin_user, tmp_path, export_root
):
    token = worker_token(org)
    dest = tmp_path / "release"
    dest.write_text("a file in the way")
    task = task_create(
        org=org,
        actor="t",
        title="export",
        agent="builder",
        input=plan(("file_write", {"path": "notes.md", "content": "# 1.4\n"})),
        export_destination=str(dest),
    )
    code, out = run_worker(daphne_server, token)
    assert code == 0, out
    supervise_once()
    action = RecoveryAction.objects.get(task=task, kind="workspace_export")
    dest.unlink()
    admin = token_client(user_token(admin_user))
    r = admin.post(
        f"/api/actions/{action.pk}/repair/",
        {"version": action.version, "repair": "retry_export", "run": action.run_id},
        format="json",
    )
    assert r.status_code == 202 and r.json()["action"]["status"] == "resolved", r.content
    assert (dest / "notes.md").read_text() == "# 1.4\n"
