"""Repair jobs (workers anywhere): a repair of a workspace a worker holds is queued, claimed by a worker of its
label, done on that worker's disk and applied from its report — the server never opens that disk."""

import threading
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from recovery.action_log import action_open
from recovery.models import ActionKind, HeldCopy, RecoveryAction, Repair
from recovery.workspaces import repair_jobs
from tasks.models import Event, Step, Task, WorkerInstance, WorkspaceFile, WorkspaceReport
from tasks.worker_workspaces import clean_entry, manifest_apply
from tests.conftest import token_client
from tests.factories import user_token, worker_token
from tests.helpers import outer_html, visible_text
from tests.recovery import engine as e
from tests.recovery.workdisk import sha

pytestmark = pytest.mark.django_db

W = "file_write"
LABEL = "box-a"
PLAN = [
    (W, {"path": "draft.md", "content": "first draft\n"}),
    ("sleep", {"seconds": 0}),
    (W, {"path": "notes.md", "content": "notes\n"}),
]


def entry(path: str, content: str, *, mtime_ns: int = 1_700_000_000_000_000_000, ino: int = 11) -> dict:
    """An ENTRY as a worker sends it (spec: ENTRY)."""
    return {
        "path": path,
        "kind": "file",
        "size": len(content.encode()),
        "mtime_ns": mtime_ns,
        "ctime_ns": mtime_ns,
        "ino": ino,
        "sha256": sha(content),
        "link": None,
        "kept": True,
        "not_kept": "",
    }


@pytest.fixture
def admin_api(admin_user):
    return token_client(user_token(admin_user))


@pytest.fixture
def held(org, agent, tmp_path):
    """A task whose workspace a worker labelled LABEL holds (the server's own path does not exist), step 1 of its
    plan completed and recorded, and a live workspace_validation action on its run."""
    task = e.start(org, PLAN)
    run = e.crash_after_dispatch(e.first_run(task), 2)  # step 1 completed, step 2 cut off: the lease lapsed
    Task.objects.filter(pk=task.pk).update(
        workspace=str(tmp_path / "not-on-this-server"),
        workspace_label=LABEL,
        workspace_key=f"{org.slug}/task-{task.pk}",
        workspace_root=f"/srv/box-a/{org.slug}/task-{task.pk}",
    )
    WorkspaceFile.objects.filter(task=task).delete()
    step = Step.objects.get(run=run, seq=1)
    recorded = entry("draft.md", "first draft\n")
    WorkspaceFile.objects.create(
        task=task,
        path="draft.md",
        size=recorded["size"],
        mtime_ns=recorded["mtime_ns"],
        ctime_ns=recorded["ctime_ns"],
        ino=recorded["ino"],
        sha256=recorded["sha256"],
        kept=True,
        step=step,
        run_id_seen=run.pk,
        seq=1,
        tool=W,
    )
    action = action_open(
        run=run,
        kind=ActionKind.WORKSPACE_VALIDATION,
        cause="workspace_validation_failed",
        evidence={
            "files": [{"path": "draft.md", "status": "changed"}],
            "counts": {"changed": 1},
            "workspace_on": "worker",
            "label": LABEL,
        },
        recovery_owner="role:admin",
    )
    task.refresh_from_db()
    return task, action


def repair(client, action, name="reconcile"):
    action.refresh_from_db()
    body = {"version": action.version, "repair": name, "run": action.run_id}
    return client.post(f"/api/actions/{action.pk}/repair/", body, format="json")


def claim(client, *, instance="box-a-1", label=LABEL):
    return client.post("/api/runner/repairs/claim/", {"worker": instance, "label": label}, format="json")


def report(client, job_id, body, *, instance="box-a-1"):
    return client.post(f"/api/runner/repairs/{job_id}/result/", {"worker": instance, **body}, format="json")


def card_text(user, task, action) -> str:
    page = Client()
    page.force_login(user)
    return visible_text(outer_html(page.get(f"/tasks/{task.pk}/").text, f"action-{action.pk}"))


def adopted_draft() -> dict:
    """The worker's reconcile: draft.md changed by hand, adopted."""
    return {
        "root": "/srv/box-a/acme/task-x",
        "checked": 1,
        "adopted": [
            {
                "path": "draft.md",
                "status": "changed",
                "before": entry("draft.md", "first draft\n"),
                "after": entry("draft.md", "first draft\nedited\n", ino=12),
            }
        ],
        "held": [],
        "held_copy": None,
        "held_files": [],
        "remaining": [],
    }


# --- queued, never done on the server --------------------------------------------------------------


def test_a_reconcile_of_a_workspace_a_worker_holds_is_queued_and_reads_no_disk(held, admin_api):
    task, action = held
    r = repair(admin_api, action)
    assert r.status_code == 202, r.content
    body = r.json()
    assert (body["status"], body["result"], body["label"], body["claimed_by"]) == ("queued", None, LABEL, None)
    assert "waiting for a worker holding this workspace" in body["summary"]
    action.refresh_from_db()
    assert action.status == "open" and body["action"]["version"] == action.version
    assert Event.objects.filter(kind="action_repair_queued", task=task).count() == 1
    assert not Path(task.workspace).exists()
    assert not HeldCopy.objects.exists()
    assert WorkspaceFile.objects.get(task=task, path="draft.md").sha256 == sha("first draft\n")


def test_a_second_repair_while_one_waits_for_a_worker_is_refused(held, admin_api, runner):
    _, action = held
    assert repair(admin_api, action).status_code == 202
    for name in ("reconcile", "reissue"):
        r = repair(admin_api, action, name)
        assert r.status_code == 409, r.content
        assert (r.json()["code"], r.json()["reason"]) == ("not_eligible", "repair_pending")
    assert claim(runner).status_code == 200
    r = repair(admin_api, action, "reissue")
    assert r.status_code == 409 and r.json()["reason"] == "repair_pending"
    assert Repair.objects.filter(action=action).count() == 1


# --- claim ----------------------------------------------------------------------------------------


def test_only_a_worker_of_its_label_and_organization_takes_the_job(held, admin_api, runner, other_org):
    task, action = held
    job_id = repair(admin_api, action).json()["id"]
    assert claim(runner, label="box-b").status_code == 204
    stranger = token_client(worker_token(other_org, "w1"))
    assert claim(stranger).status_code == 204
    r = claim(runner)
    assert r.status_code == 200, r.content
    job = r.json()
    assert (job["repair"], job["kind"], job["task"], job["org"]) == (job_id, "reconcile", task.pk, "acme")
    assert job["workspace_key"] == f"acme/task-{task.pk}" and job["hint"].endswith("-reconcile")
    assert [m["path"] for m in job["manifest"]] == ["draft.md"]
    assert job["manifest"][0]["sha256"] == sha("first draft\n")
    assert job["plan"] == [
        {"seq": 2, "tool": "sleep", "paths": [], "all": False},
        {"seq": 3, "tool": W, "paths": ["notes.md"], "all": False},
    ]
    row = Repair.objects.get(pk=job_id)
    assert (row.status, row.claimed_by) == ("claimed", "w1/box-a-1")
    assert claim(runner).status_code == 204  # taken: nobody else gets it
    assert WorkerInstance.objects.filter(instance="box-a-1").exists()
    assert Event.objects.filter(kind="action_repair_claimed", task=task).count() == 1


def test_a_job_whose_claimer_went_silent_is_taken_over_and_the_first_may_no_longer_report(
    held, admin_api, runner, settings
):
    _, action = held
    job_id = repair(admin_api, action).json()["id"]
    assert claim(runner, instance="box-a-1").status_code == 200
    assert claim(runner, instance="box-a-2").status_code == 204
    silent = timezone.now() - timedelta(seconds=settings.CONSOLE_LEASE_SECONDS + 1)
    Repair.objects.filter(pk=job_id).update(claimed_at=silent)
    assert claim(runner, instance="box-a-2").status_code == 200
    r = report(runner, job_id, {"ok": True, "result": adopted_draft()}, instance="box-a-1")
    assert r.status_code == 409 and r.json()["reason"] == "not_claimer"
    assert report(runner, job_id, {"ok": True, "result": adopted_draft()}, instance="box-a-2").status_code == 200


@pytest.mark.django_db(transaction=True)
def test_two_workers_claiming_at_once_get_the_job_once(org, agent, admin_user, tmp_path):
    if connection.vendor != "postgresql":
        pytest.skip("real concurrent claims need PostgreSQL (SQLite serializes every writer)")
    admin_api = token_client(user_token(admin_user))
    task = e.start(org, PLAN)
    Task.objects.filter(pk=task.pk).update(workspace_label=LABEL, workspace_key=f"acme/task-{task.pk}")
    action = action_open(
        run=e.first_run(task), kind=ActionKind.WORKSPACE_VALIDATION, cause="x", evidence={}, recovery_owner="r"
    )
    assert repair(admin_api, action).status_code == 202
    key = worker_token(org, "w1")
    answers, start = [], threading.Barrier(4)

    def take(n: int):
        start.wait()
        answers.append(claim(token_client(key), instance=f"box-a-{n}").status_code)
        connection.close()

    threads = [threading.Thread(target=take, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(answers) == [200, 204, 204, 204]


# --- the worker's report ----------------------------------------------------------------------


def test_a_reconcile_that_adopts_everything_records_the_manifest_and_resolves_the_action(held, admin_api, runner):
    task, action = held
    job_id = repair(admin_api, action).json()["id"]
    claim(runner)
    body = {"ok": True, "result": adopted_draft()}
    r = report(runner, job_id, body)
    assert r.status_code == 200, r.content
    saved = r.json()
    assert saved["status"] == "done" and saved["result"]["counts"] == {"checked": 1, "adopted": 1, "held": 0}
    assert saved["result"]["worker"] == "w1/box-a-1" and saved["result"]["workspace"] == "/srv/box-a/acme/task-x"
    row = WorkspaceFile.objects.get(task=task, path="draft.md")
    assert (row.sha256, row.source, row.ino) == (sha("first draft\nedited\n"), "reconcile", 12)
    action.refresh_from_db()
    assert (action.status, action.resolution, action.closed_by) == ("resolved", "reconciled", "ada")
    rep = WorkspaceReport.objects.get(task=task, kind="repair")
    assert (rep.worker, rep.label, rep.checked, rep.files) == ("w1/box-a-1", LABEL, 1, [])
    task.refresh_from_db()
    assert task.workspace_root == "/srv/box-a/acme/task-x"
    # The same report again is answered with what was saved; another one is refused.
    again = report(runner, job_id, body)
    assert again.status_code == 200 and again.json()["status"] == "done"
    other = report(runner, job_id, {"ok": False, "error": {"code": "x", "detail": "y"}})
    assert other.status_code == 409 and other.json()["reason"] == "already_reported"
    assert not Path(task.workspace).exists()


def test_a_reconcile_that_holds_a_file_keeps_the_action_open_with_its_held_copy(held, admin_api, runner, admin_user):
    task, action = held
    job_id = repair(admin_api, action).json()["id"]
    claim(runner)
    result = adopted_draft()
    notes = entry("notes.md", "by hand\n", ino=13)
    copy = "/srv/box-a/acme/task-x.held/20261206-210000-reconcile"
    result.update(
        checked=2,
        held=[
            {
                "path": "notes.md",
                "status": "added",
                "reason": "plan_changes",
                "seqs": [3],
                "before": None,
                "after": notes,
                "copy": f"{copy}/notes.md",
            }
        ],
        held_copy=copy,
        held_files=[{"path": "notes.md", "sha256": sha("by hand\n"), "size": 8, "why": "plan_changes"}],
        remaining=[{"path": "notes.md", "status": "added", "recorded": None, "actual": notes, "diff": None}],
    )
    r = report(runner, job_id, {"ok": True, "result": result})
    assert r.status_code == 200, r.content
    assert r.json()["status"] == "held"
    action.refresh_from_db()
    assert action.status == "open"
    assert [f["path"] for f in action.evidence["files"]] == ["notes.md"]
    assert action.evidence["files"][0]["plan"] == [3] and action.evidence["counts"]["added"] == 1
    kept = HeldCopy.objects.get(task=task)
    assert (kept.reason, kept.path, kept.repair_id) == ("reconcile", copy, job_id)
    assert WorkspaceFile.objects.get(task=task, path="draft.md").source == "reconcile"
    assert not WorkspaceFile.objects.filter(task=task, path="notes.md").exists()
    assert WorkspaceReport.objects.get(task=task, kind="repair").files[0]["path"] == "notes.md"
    text = card_text(admin_user, task, action)
    assert "notes.md is held" in text and "on worker w1/box-a-1" in text
    assert "Repaired" not in text


def test_a_job_the_worker_could_not_do_keeps_the_action_open_and_says_why(held, admin_api, runner, admin_user):
    task, action = held
    job_id = repair(admin_api, action, "reissue").json()["id"]
    claim(runner)
    error = {"code": "content_not_kept", "detail": "1 file's recorded content is not in the store", "files": ["a.bin"]}
    r = report(runner, job_id, {"ok": False, "error": error})
    assert r.status_code == 200, r.content
    assert r.json()["status"] == "failed" and r.json()["result"]["error"]["code"] == "content_not_kept"
    action.refresh_from_db()
    assert action.status == "open"
    shown = admin_api.get(f"/api/actions/{action.pk}/").json()
    assert "1 file's recorded content is not in the store (content_not_kept: a.bin)" in " ".join(shown["summary"])
    text = card_text(admin_user, task, action)
    assert "failed — 1 file's recorded content is not in the store" in text and "Repaired" not in text
    assert not HeldCopy.objects.exists()
    assert repair(admin_api, action).status_code == 202  # another repair may be asked now


def test_a_reissue_switches_the_task_to_the_fresh_directory_and_keeps_the_old_one(held, admin_api, runner):
    task, action = held
    job_id = repair(admin_api, action, "reissue").json()["id"]
    claim(runner)
    fresh = f"acme/task-{task.pk}.reissue-20261206-210000"
    rebuilt = entry("draft.md", "first draft\n", ino=99)
    result = {
        "root": f"/srv/box-a/{fresh}",
        "workspace_key": fresh,
        "old_root": task.workspace_root,
        "checked": 1,
        "rebuilt": [{"path": "draft.md", "kind": "file", "sha256": sha("first draft\n"), "size": 12}],
        "not_remade": [],
        "kept_differences": [{"path": "draft.md", "status": "changed", "sha256": sha("x"), "why": "changed"}],
        "entries": [rebuilt],
    }
    r = report(runner, job_id, {"ok": True, "result": result})
    assert r.status_code == 200, r.content
    old_root = task.workspace_root
    task.refresh_from_db()
    assert (task.workspace_key, task.workspace_root) == (fresh, f"/srv/box-a/{fresh}")
    row = WorkspaceFile.objects.get(task=task, path="draft.md")
    assert (row.ino, row.sha256, row.seq, row.source) == (99, sha("first draft\n"), 1, "step")
    kept = HeldCopy.objects.get(task=task)
    assert (kept.reason, kept.path) == ("reissue", old_root)
    action.refresh_from_db()
    assert (action.status, action.resolution) == ("resolved", "reissued")
    assert "rebuilt from recorded content" in r.json()["summary"]
    assert r.json()["result"]["rebuilt"] == [
        {"path": "draft.md", "before": sha("first draft\n"), "after": sha("first draft\n"), "size": 12}
    ]


def test_a_report_that_names_a_path_outside_the_workspace_saves_nothing(held, admin_api, runner):
    task, action = held
    job_id = repair(admin_api, action).json()["id"]
    claim(runner)
    result = adopted_draft()
    result["adopted"][0]["path"] = "../escape.md"
    r = report(runner, job_id, {"ok": True, "result": result})
    assert r.status_code == 400, r.content
    assert Repair.objects.get(pk=job_id).status == "claimed"
    assert WorkspaceFile.objects.get(task=task, path="draft.md").sha256 == sha("first draft\n")


def test_a_report_for_an_action_closed_meanwhile_is_kept_failed_and_changes_nothing(held, admin_api, runner):
    task, action = held
    job_id = repair(admin_api, action).json()["id"]
    claim(runner)
    RecoveryAction.objects.filter(pk=action.pk).update(status="cancelled")
    r = report(runner, job_id, {"ok": True, "result": adopted_draft()})
    assert r.status_code == 200, r.content
    assert r.json()["status"] == "failed" and r.json()["result"]["error"]["code"] == "action_closed"
    assert WorkspaceFile.objects.get(task=task, path="draft.md").sha256 == sha("first draft\n")


def test_a_job_whose_action_closed_before_a_worker_took_it_ends_failed_and_is_not_handed_out(held, admin_api, runner):
    _, action = held
    job_id = repair(admin_api, action).json()["id"]
    RecoveryAction.objects.filter(pk=action.pk).update(status="cancelled")
    assert claim(runner).status_code == 204
    job = Repair.objects.get(pk=job_id)
    assert (job.status, job.result["error"]["code"]) == ("failed", "action_closed")


# --- the card ---------------------------------------------------------------------------------------


def test_the_card_says_it_waits_for_a_worker_and_who_can_start_one(held, admin_api, runner, admin_user):
    task, action = held
    assert "A worker holding this workspace (label “box-a”) does it on its disk" in card_text(admin_user, task, action)
    page = Client()
    page.force_login(admin_user)
    body = {"version": action.version, "run": action.run_id, "repair": "reconcile"}
    answer = page.post(f"/actions/{action.pk}/repair/", body, HTTP_HX_REQUEST="true")
    assert answer.status_code == 200
    assert "waiting for a worker holding this workspace" in visible_text(answer.content.decode())
    text = card_text(admin_user, task, action)
    assert "Waiting for a worker" in text
    assert "Reconcile asked by ada" in text and "waiting for a worker holding this workspace" in text
    assert "No worker holding workspaces labelled “box-a” is asking for work now" in text
    assert "CONSOLE_WORKER_WORKSPACES_LABEL=box-a" in text
    assert "Confirm reconcile" not in text and "Repaired" not in text

    assert claim(runner, label="box-a").status_code == 200
    text = card_text(admin_user, task, action)
    assert "Repairing on a worker" in text and "worker w1/box-a-1 is doing it since" in text
    assert "is asking for work now" not in text and "Repaired" not in text


def test_a_queued_job_with_a_worker_asking_says_when_it_last_asked(held, admin_api, runner, admin_user, org):
    task, action = held
    repair_jobs.label_polled(worker=e.worker(org), instance="box-a-9", label=LABEL, now=timezone.now())
    repair(admin_api, action)
    text = card_text(admin_user, task, action)
    assert "takes it when it next asks for work" in text and "w1/box-a-9" in text


# --- with the SDK's own repair on a real disk ------------------------------------------------------


def test_the_sdk_worker_s_reconcile_and_reissue_are_applied_as_it_reports_them(
    org, agent, admin_user, runner, tmp_path
):
    """The worker side is the SDK's (recovery_console.workspace): its reports are what the server accepts."""
    from recovery_console.workspace import Store, entry_at, hashed, reconcile, reissue

    admin_api = token_client(user_token(admin_user))
    task = e.start(org, PLAN)
    run = e.crash_after_dispatch(e.first_run(task), 2)
    key = f"acme/task-{task.pk}"
    workspace = tmp_path / "worker-root" / "acme" / f"task-{task.pk}"
    workspace.mkdir(parents=True)
    (workspace / "draft.md").write_text("first draft\n")
    recorded = hashed(str(workspace), entry_at(str(workspace), "draft.md"), Store(str(workspace), "acme")).wire()
    Task.objects.filter(pk=task.pk).update(
        workspace=str(tmp_path / "not-on-this-server"), workspace_label=LABEL, workspace_key=key,
        workspace_root=str(workspace),
    )  # fmt: skip
    WorkspaceFile.objects.filter(task=task).delete()
    manifest_apply(task=task, step=Step.objects.get(run=run, seq=1), entries=dict([clean_entry(recorded)]))
    action = action_open(
        run=run, kind=ActionKind.WORKSPACE_VALIDATION, cause="workspace_validation_failed",
        evidence={"workspace_on": "worker", "label": LABEL}, recovery_owner="role:admin",
    )  # fmt: skip
    # A person edits the draft and writes notes.md, which step 3 of the remaining plan also writes.
    (workspace / "draft.md").write_text("first draft\nedited by hand\n")
    (workspace / "notes.md").write_text("by hand\n")

    assert repair(admin_api, action).status_code == 202
    job = claim(runner).json()
    done = reconcile(str(workspace), "acme", job)
    r = report(runner, job["repair"], done)
    assert r.status_code == 200, r.content
    assert r.json()["status"] == "held" and r.json()["result"]["counts"] == {"checked": 2, "adopted": 1, "held": 1}
    assert WorkspaceFile.objects.get(task=task, path="draft.md").sha256 == sha("first draft\nedited by hand\n")
    copy = HeldCopy.objects.get(task=task, reason="reconcile")
    assert (Path(copy.path) / "notes.md").read_text() == "by hand\n"  # on the worker's disk, copied by it
    action.refresh_from_db()
    assert action.status == "open" and [f["path"] for f in action.evidence["files"]] == ["notes.md"]

    assert repair(admin_api, action, "reissue").status_code == 202
    job = claim(runner).json()
    assert [m["path"] for m in job["manifest"]] == ["draft.md"]
    r = report(runner, job["repair"], reissue(str(workspace), str(tmp_path / "worker-root"), job))
    assert r.status_code == 200, r.content
    task.refresh_from_db()
    assert task.workspace_key.startswith(f"{key}.reissue-") and task.workspace_root != str(workspace)
    assert (Path(task.workspace_root) / "draft.md").read_text() == "first draft\nedited by hand\n"
    assert (workspace / "notes.md").exists()  # the old directory is left as it was
    action.refresh_from_db()
    assert (action.status, action.resolution) == ("resolved", "reissued")
