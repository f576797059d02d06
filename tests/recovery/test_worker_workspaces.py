"""Workspaces a worker holds on its own disk, through the runner API (workers anywhere, DESIGN §9).

The server never reads that disk: the worker sends each step's entries, and
before a continuation runs anything it compares its workspace with the manifest
the claim hands it and reports the result. These tests drive the runner API as
a remote worker would, with a server workspace root that holds none of the files.
"""

import hashlib
import os

import pytest

from recovery.models import RecoveryAction
from recovery.supervisor.loop import supervise_once
from recovery.words.workspaces import workspace_confirmations
from tasks.models import Event, Run, Task, WorkspaceFile, WorkspaceReport
from tests.recovery import engine as e

pytestmark = pytest.mark.django_db

W = "file_write"
HELD = {"label": "pod-a", "root": "/srv/agent-workspaces"}
PLAN = [(W, {"path": "draft.md", "content": "first draft\n"}), ("sleep", {"seconds": 0}), ("file_read", {"path": "x"})]


def entry(path: str, content: str, *, mtime_ns: int = 1_700_000_000_000_000_000, ino: int = 11) -> dict:
    data = content.encode()
    return {
        "path": path, "kind": "file", "size": len(data), "mtime_ns": mtime_ns, "ctime_ns": mtime_ns, "ino": ino,
        "sha256": hashlib.sha256(data).hexdigest(), "link": None, "kept": True, "not_kept": "",
    }  # fmt: skip


def claim(runner, **extra):
    return runner.post("/api/runner/claim/", {"worker": "pod-a-1", "workspaces": HELD, **extra}, format="json")


def step(runner, claimed, seq, tool, args, **complete):
    run, epoch = claimed["run"], claimed["lease_epoch"]
    r = runner.post(
        f"/api/runner/runs/{run}/steps/", {"epoch": epoch, "seq": seq, "tool": tool, "args": args, "dispatch": True},
        format="json",
    )  # fmt: skip
    assert r.status_code in (200, 201), r.content
    r = runner.post(f"/api/runner/runs/{run}/steps/{seq}/complete/", {"epoch": epoch, "ok": True, **complete},
                    format="json")  # fmt: skip
    assert r.status_code == 200, r.content
    return r.json()


def crashed_after_writing(org, runner) -> Task:
    """A held task whose first run wrote draft.md on the worker, then died at step 2: the supervisor resumes it."""
    task = e.start(org, PLAN)
    claimed = claim(runner).json()
    step(runner, claimed, 1, W, PLAN[0][1], workspace={"root": "/srv/agent-workspaces/x", "label": "pod-a",
                                                       "entries": [entry("draft.md", "first draft\n")]})  # fmt: skip
    r = runner.post(f"/api/runner/runs/{claimed['run']}/steps/",
                    {"epoch": claimed["lease_epoch"], "seq": 2, "tool": "sleep", "args": {"seconds": 0},
                     "dispatch": True}, format="json")  # fmt: skip
    assert r.status_code in (200, 201), r.content
    e.lapse()
    supervise_once()  # a replay-safe step was cut off: the continuation is queued
    return task


def succeeded_and_exporting(org, runner, dest) -> tuple[dict, dict]:
    """A held task with a destination whose run succeeded, and the export job its worker took: (claim, job)."""
    e.start(org, [("sleep", {"seconds": 0})], export_destination=str(dest))
    claimed = claim(runner).json()
    step(runner, claimed, 1, "sleep", {"seconds": 0})
    runner.post(f"/api/runner/runs/{claimed['run']}/finish/", {"epoch": claimed["lease_epoch"],
                "status": "succeeded"}, format="json")  # fmt: skip
    return claimed, runner.post("/api/runner/exports/claim/", {"label": "pod-a"}, format="json").json()


def test_a_held_workspace_is_recorded_from_the_workers_entries_and_its_task_goes_only_to_that_label(
    org, agent, runner, make_token_client
):
    from tests.factories import worker_token

    task = e.start(org, PLAN)
    claimed = claim(runner).json()
    task.refresh_from_db()
    assert claimed["workspace_key"] == f"{org.slug}/task-{task.pk}"
    assert (task.workspace_label, task.workspace_root) == ("pod-a", f"/srv/agent-workspaces/{org.slug}/task-{task.pk}")
    step(runner, claimed, 1, W, PLAN[0][1], workspace={"root": task.workspace_root, "label": "pod-a",
                                                       "entries": [entry("draft.md", "first draft\n")]})  # fmt: skip
    row = WorkspaceFile.objects.get(task=task, path="draft.md")
    assert (row.sha256, row.seq, row.tool, row.kept) == (entry("draft.md", "first draft\n")["sha256"], 1, W, True)
    assert not os.path.exists(os.path.join(task.workspace, "draft.md"))  # the server's own directory: untouched
    e.lapse()
    supervise_once()
    # The continuation waits for a worker serving pod-a: a worker with no workspaces, or another label, gets none.
    other = make_token_client(worker_token(org, "w2"))
    assert other.post("/api/runner/claim/", {"worker": "plain"}, format="json").status_code == 204
    assert other.post("/api/runner/claim/", {"worker": "b", "workspaces": {"label": "pod-b", "root": "/b"}},
                      format="json").status_code == 204  # fmt: skip
    again = claim(runner).json()
    assert again["run"] != claimed["run"]
    assert [m["path"] for m in again["workspace_check"]["manifest"]] == ["draft.md"]


def test_a_difference_the_worker_reports_refuses_the_continuation_with_the_files_and_their_diff(
    org, agent, runner, admin_client
):
    task = crashed_after_writing(org, runner)
    cont = claim(runner).json()
    diff = "--- recorded/draft.md\n+++ workspace/draft.md\n@@ -1 +1,2 @@\n first draft\n+edited by hand\n"
    body = {
        "epoch": cont["lease_epoch"], "root": task.workspace_root or "/srv/x", "label": "pod-a", "checked": 2,
        "files": [
            {"path": "draft.md", "status": "changed", "recorded": entry("draft.md", "first draft\n"),
             "actual": entry("draft.md", "first draft\nedited by hand\n", ino=12), "diff": diff},
            {"path": "notes.txt", "status": "added", "recorded": None, "actual": entry("notes.txt", "mine\n")},
        ],
    }  # fmt: skip
    r = runner.post(f"/api/runner/runs/{cont['run']}/workspace/", body, format="json")
    assert r.status_code == 200, r.content
    answer = r.json()
    assert answer["admitted"] is False
    run = Run.objects.get(pk=cont["run"])
    assert (run.status, run.error_code, run.started_at) == ("failed", "workspace_validation_failed", None)
    assert "2 files differ from the manifest: draft.md changed, notes.txt added." in run.error_detail
    assert not run.steps.filter(reused_from__isnull=True).exists()  # nothing of it ran
    action = RecoveryAction.objects.get(pk=answer["action"])
    assert (action.kind, action.status) == ("workspace_validation", "open")
    files = {f["path"]: f for f in action.evidence["files"]}
    assert files["draft.md"]["diff"] == diff and files["draft.md"]["recorded"]["seq"] == 1
    assert files["notes.txt"]["status"] == "added" and action.evidence["workspace_on"] == "worker"
    # The operator API answers from that report: the worker's path, who reported it and when.
    state = admin_client.get(f"/api/tasks/{task.pk}/workspace/").json()
    assert state["path_is"] == "worker" and state["report"]["worker"].endswith("pod-a-1")
    assert {f["path"]: f["status"] for f in state["files"]} == {"draft.md": "changed", "notes.txt": "added"}
    assert WorkspaceReport.objects.filter(task=task, kind="validation").count() == 1
    # The page shows the action with the file and its diff (the same card as a refusal at admission).
    page = admin_client.get(f"/tasks/{task.pk}/").content.decode()
    assert "edited by hand" in page and "draft.md" in page
    assert "This path is on worker w1/pod-a-1 (workspaces pod-a); the server does not read it." in page


def test_no_difference_starts_the_continuation_and_a_stale_report_is_refused(org, agent, runner):
    crashed_after_writing(org, runner)
    cont = claim(runner).json()
    run = Run.objects.get(pk=cont["run"])
    assert run.status == "running"
    body = {"epoch": cont["lease_epoch"], "root": "/srv/x", "label": "pod-a", "checked": 1, "files": []}
    stale = runner.post(f"/api/runner/runs/{cont['run']}/workspace/", {**body, "epoch": 999}, format="json")
    assert stale.status_code == 409
    r = runner.post(f"/api/runner/runs/{cont['run']}/workspace/", body, format="json")
    assert r.json() == {"admitted": True}
    run.refresh_from_db()
    assert run.carry["validated"] is True
    checked = Event.objects.get(run=run, kind="run_workspace_checked")
    assert checked.payload == {"checked": 1, "worker": "w1/pod-a-1"}
    bad = runner.post(f"/api/runner/runs/{cont['run']}/workspace/",
                      {**body, "files": [{"path": "../x", "status": "added", "actual": entry("x", "x")}]},
                      format="json")  # fmt: skip
    assert bad.status_code == 400


def test_a_held_workspace_is_exported_by_its_worker_and_the_supervisor_never_copies_it(org, agent, runner, export_root):
    from recovery.models import Export
    from recovery.workspaces.exports import exports_run

    dest = export_root / "out"
    task = e.start(org, [(W, {"path": "notes.md", "content": "# 1.4\n"})], export_destination=str(dest))
    claimed = claim(runner).json()
    step(runner, claimed, 1, W, {"path": "notes.md", "content": "# 1.4\n"},
         workspace={"root": "/srv/x", "label": "pod-a", "entries": [entry("notes.md", "# 1.4\n")]})  # fmt: skip
    r = runner.post(f"/api/runner/runs/{claimed['run']}/finish/", {"epoch": claimed["lease_epoch"],
                    "status": "succeeded"}, format="json")  # fmt: skip
    assert r.status_code == 200, r.content
    assert exports_run() == [] and not Export.objects.exists()  # the supervisor leaves it to the worker
    assert runner.post("/api/runner/exports/claim/", {"label": "pod-b"}, format="json").status_code == 204
    job = runner.post("/api/runner/exports/claim/", {"worker": "pod-a-1", "label": "pod-a"}, format="json").json()
    assert (job["task"], job["destination"], job["workspace_key"]) == (task.pk, str(dest), f"{org.slug}/task-{task.pk}")
    copied = {"checked": 1, "copied": [{"path": "notes.md", "size": 6, "before": None, "after": "ab"}]}
    r = runner.post(f"/api/runner/exports/{job['export']}/result/", {"ok": True, "result": copied}, format="json")
    assert r.status_code == 200, r.content
    export = Export.objects.get(pk=job["export"])
    assert export.ok and export.result["counts"]["copied"] == 1 and export.finished_at is not None
    assert not dest.exists()  # the server copied nothing itself
    assert runner.post("/api/runner/exports/claim/", {"label": "pod-a"}, format="json").status_code == 204


def test_a_failed_export_on_the_worker_opens_the_export_action_with_its_error(org, agent, runner, export_root):
    dest = export_root / "out"
    claimed, job = succeeded_and_exporting(org, runner, dest)
    error = f"{dest} is a file, not a folder: nothing can be copied into it."
    r = runner.post(f"/api/runner/exports/{job['export']}/result/", {"ok": False, "result": {}, "error": error},
                    format="json")  # fmt: skip
    assert r.json()["ok"] is False
    action = RecoveryAction.objects.get(run_id=claimed["run"], kind="workspace_export")
    assert action.status == "open" and action.evidence["error"] == error
    # Its Retry export says who does it: the worker holding the workspace, on its disk.
    assert "A worker holding this workspace does it on its disk" in workspace_confirmations(action)["retry_export"][0]


def test_a_retry_whose_worker_dies_before_its_check_is_not_called_continued_and_its_action_opens_again(
    org, agent, runner, api
):
    from recovery.models import RecoveryAttempt

    action = e.parked(org, [("sleep", {"seconds": 0}), (W, {"path": "a.md", "content": "a"})], 2)
    Task.objects.filter(pk=action.task_id).update(workspace_label="pod-a")  # held by the pod-a workers
    r = api.post(f"/api/actions/{action.pk}/retry/", {"version": action.version, "accept_duplicate_risk": True},
                 format="json")  # fmt: skip
    assert r.status_code == 202, r.content
    cont = claim(runner).json()
    assert "workspace_check" in cont
    action.refresh_from_db()
    assert action.status == "retrying"  # claimed, not yet checked: nothing is said to have continued
    e.lapse()  # the worker died before it reported its check
    action.refresh_from_db()
    attempt = RecoveryAttempt.objects.get(action=action)
    assert attempt.outcome == "rejected" and "stopped renewing its lease" in attempt.rejected_detail
    assert action.status == "open"


def test_a_repair_task_of_a_held_workspace_goes_to_the_same_workers_and_directory(org, agent, runner):
    from tests.conftest import token_client
    from tests.factories import make_member, user_token

    task = crashed_after_writing(org, runner)
    cont = claim(runner).json()
    gone = {"path": "draft.md", "status": "missing", "recorded": entry("draft.md", "first draft\n")}
    body = {"epoch": cont["lease_epoch"], "root": "/srv/x", "label": "pod-a", "checked": 1, "files": [gone]}
    action = runner.post(f"/api/runner/runs/{cont['run']}/workspace/", body, format="json").json()["action"]
    admin = token_client(user_token(make_member(org, "ada2", "admin")))
    r = admin.post(f"/api/actions/{action}/repair-task/", {"agent": agent.name}, format="json")
    assert r.status_code == 201, r.content
    repair = Task.objects.get(pk=r.json()["id"])
    task.refresh_from_db()
    assert (repair.workspace_label, repair.workspace_key) == (
        "pod-a",
        task.workspace_key or f"{org.slug}/task-{task.pk}",
    )


def test_a_retry_export_of_a_held_workspace_is_a_job_the_worker_does_and_reports(org, agent, runner, export_root):
    from recovery.models import Export, Repair
    from tests.conftest import token_client
    from tests.factories import make_member, user_token

    dest = export_root / "out"
    claimed, job = succeeded_and_exporting(org, runner, dest)
    runner.post(f"/api/runner/exports/{job['export']}/result/", {"ok": False, "error": "disk full"}, format="json")
    action = RecoveryAction.objects.get(run_id=claimed["run"], kind="workspace_export")
    admin = token_client(user_token(make_member(org, "ada3", "admin")))
    r = admin.post(f"/api/actions/{action.pk}/repair/", {"version": action.version, "repair": "retry_export"},
                   format="json")  # fmt: skip
    assert r.status_code == 202, r.content
    assert r.json()["status"] == "queued" and r.json()["result"] is None
    job = runner.post("/api/runner/repairs/claim/", {"worker": "pod-a-1", "label": "pod-a"}, format="json").json()
    assert (job["kind"], job["destination"]) == ("retry_export", str(dest))
    copied = {"checked": 1, "copied": [{"path": "a.md", "size": 1, "before": None, "after": "ab"}]}
    r = runner.post(f"/api/runner/repairs/{job['repair']}/result/", {"worker": "pod-a-1", "ok": True,
                    "result": copied}, format="json")  # fmt: skip
    assert r.status_code == 200, r.content
    action.refresh_from_db()
    assert (action.status, action.resolution) == ("resolved", "exported")
    export = Export.objects.filter(run_id=claimed["run"]).order_by("-id").first()
    assert export.ok and export.repair_id == job["repair"] and export.result["counts"]["copied"] == 1
    assert Repair.objects.get(pk=job["repair"]).status == "done"
    assert "1 file copied to" in admin.get(f"/api/actions/{action.pk}/").json()["repairs"][0]["summary"]
    assert not dest.exists()  # the server copied nothing itself
