"""Workspaces (DESIGN §9) with real files on disk: manifest, validation, repairs, export, holds, authority."""

import os
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from recovery.models import Export, HeldCopy, RecoveryAction, Repair
from recovery.supervisor.loop import supervise_once
from tasks.models import Run, Step, Task, WorkspaceFile
from tests.conftest import token_client
from tests.factories import user_token
from tests.helpers import outer_html, visible_text
from tests.recovery import engine as e
from tests.recovery.workdisk import (
    contents,
    crash_at,
    edit_by_hand,
    finish_all,
    run_steps,
    sha,
    validation_action,
)

pytestmark = pytest.mark.django_db

W = "file_write"


@pytest.fixture
def admin_api(admin_user):
    return token_client(user_token(admin_user))


def repair(client, action, name, **extra):
    action.refresh_from_db()
    body = {"version": action.version, "repair": name, "run": action.run_id, **extra}
    return client.post(f"/api/actions/{action.pk}/repair/", body, format="json")


def rows(task) -> dict[str, WorkspaceFile]:
    return {r.path: r for r in WorkspaceFile.objects.filter(task=task)}


# --- the manifest ---------------------------------------------------------------------------


def test_every_file_changing_step_records_the_manifest_in_its_own_transaction(org, agent):
    task = e.start(
        org,
        [
            (W, {"path": "notes/a.md", "content": "one\n"}),
            ("file_edit", {"path": "notes/a.md", "old": "one", "new": "two"}),
            ("bash", {"command": "printf 'b' > b.txt && printf 'gone' > c.txt && rm c.txt"}),
            ("todo_add", {"text": "check"}),
            ("file_read", {"path": "b.txt"}),
        ],
    )
    run = e.claim(e.first_run(task))
    run_steps(run, 1)
    first = rows(task)["notes/a.md"]
    assert (first.size, first.sha256, first.seq, first.tool, first.run_id_seen) == (4, sha("one\n"), 1, W, run.pk)
    assert first.kept
    run_steps(run)
    manifest = rows(task)
    assert set(manifest) == {"notes/a.md", "b.txt", ".console/todo.json"}
    assert manifest["notes/a.md"].sha256 == sha("two\n") and manifest["notes/a.md"].seq == 2
    assert manifest["b.txt"].tool == "bash" and manifest["b.txt"].seq == 3
    assert manifest[".console/todo.json"].tool == "todo_add"
    disk = Path(task.workspace) / "b.txt"
    assert manifest["b.txt"].mtime_ns == disk.stat().st_mtime_ns


def test_a_completion_naming_a_file_outside_the_workspace_is_refused_and_saves_nothing(org, agent, runner):
    task = e.start(org, [(W, {"path": "a.txt", "content": "a"})])
    claim = runner.post("/api/runner/claim/", {"worker": "w"}, format="json").json()
    run_id, epoch = claim["run"], claim["lease_epoch"]
    runner.post(f"/api/runner/runs/{run_id}/steps/", {"epoch": epoch, "seq": 1, "tool": W, "args": {}}, format="json")
    runner.post(f"/api/runner/runs/{run_id}/steps/1/dispatch/", {"epoch": epoch}, format="json")
    for bad in (["../escape.txt"], ["/etc/passwd"], ["a/../../x"], ["ok\x00.txt"], "a.txt"):
        r = runner.post(
            f"/api/runner/runs/{run_id}/steps/1/complete/", {"epoch": epoch, "ok": True, "files": bad}, format="json"
        )
        assert r.status_code == 400, (bad, r.content)
        assert Step.objects.get(run_id=run_id, seq=1).phase == "dispatched"
    assert not WorkspaceFile.objects.filter(task=task).exists()


def test_a_symlink_is_recorded_with_its_target_and_never_followed(org, agent, tmp_path):
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    task = e.start(org, [("bash", {"command": f"ln -s {outside} link.txt && ln -s / rootlink && echo x > x.txt"})])
    finish_all(e.first_run(task))
    manifest = rows(task)
    assert set(manifest) == {"x.txt", "link.txt", "rootlink"}
    # Recorded as links with their targets; nothing was read through them (no hash, no content kept).
    assert (manifest["link.txt"].kind, manifest["link.txt"].link) == ("link", str(outside))
    assert (manifest["rootlink"].kind, manifest["rootlink"].link) == ("link", "/")
    assert manifest["link.txt"].sha256 == "" and not manifest["link.txt"].kept


# --- validation, reconcile, the continuation --------------------------------------------------


PLAN = [
    (W, {"path": "draft.md", "content": "first draft\n"}),
    ("sleep", {"seconds": 0}),
    ("file_read", {"path": "draft.md"}),
]


def test_a_hand_edit_after_a_crash_is_listed_with_its_diff_reconcile_adopts_it_and_the_continuation_runs(
    org, agent, admin_user, admin_api
):
    task = e.start(org, PLAN)
    source = crash_at(e.first_run(task), 2)  # a replay-safe step was cut off: it would resume automatically
    edit_by_hand(task, "draft.md", "first draft\nedited by hand\n")

    report = supervise_once()
    action = validation_action(task)
    assert report.continued == [] and report.opened == [action.pk]
    refused = action.run
    assert refused.status == "failed" and refused.error_code == "workspace_validation_failed"
    assert refused.started_at is None and refused.continues_id == source.pk
    f = action.evidence["files"][0]
    assert f["path"] == "draft.md" and f["status"] == "changed"
    assert f["recorded"]["sha256"] == sha("first draft\n") and f["recorded"]["seq"] == 1
    assert f["actual"]["sha256"] == sha("first draft\nedited by hand\n")
    assert f["recorded"]["size"] == 12 and f["actual"]["size"] == 27
    assert "+edited by hand" in f["diff"] and f["plan"] == []
    # Nothing continues while the workspace action is live.
    supervise_once()
    assert Run.objects.filter(task=task).count() == 2

    r = repair(admin_api, action, "reconcile")
    assert r.status_code == 202, r.content
    result = r.json()["result"]
    assert result["counts"] == {"checked": 1, "adopted": 1, "held": 0}
    assert result["adopted"][0]["before"]["sha256"] == sha("first draft\n")
    assert result["adopted"][0]["after"]["sha256"] == sha("first draft\nedited by hand\n")
    assert r.json()["action"]["status"] == "resolved"
    assert "1 adopted into the manifest" in r.json()["summary"]
    assert rows(task)["draft.md"].source == "reconcile"

    report = supervise_once()  # the hold is lifted: normal admission continues the interrupted run
    continuation = Run.objects.get(continues=source, started_at__isnull=True, status="queued")
    assert report.continued == [continuation.pk]
    continuation = e.claim(continuation)
    run_steps(continuation)
    e.finish(continuation)
    read = Step.objects.get(run=continuation, seq=3).result["content"]
    assert read == "first draft\nedited by hand\n"  # the newer content survived
    assert (Path(task.workspace) / "draft.md").read_text() == "first draft\nedited by hand\n"
    task.refresh_from_db()
    assert task.status == "done"


def test_a_file_changed_by_hand_and_by_the_plan_is_held_then_reissue_continues_in_a_clean_copy(
    org, agent, admin_api, admin_user
):
    task = e.start(
        org,
        [
            (W, {"path": "report.md", "content": "v1\n"}),
            (W, {"path": "notes.txt", "content": "notes\n"}),
            ("sleep", {"seconds": 0}),
            (W, {"path": "report.md", "content": "v2 by the plan\n"}),
        ],
    )
    source = crash_at(e.first_run(task), 3)
    edit_by_hand(task, "report.md", "v1 + a person's fix\n")
    edit_by_hand(task, "extra.txt", "added by hand\n")
    old_workspace = Path(task.workspace)
    supervise_once()
    action = validation_action(task)
    plans = {f["path"]: f["plan"] for f in action.evidence["files"]}
    assert plans == {"extra.txt": [], "report.md": [4]}

    r = repair(admin_api, action, "reconcile")
    assert r.status_code == 202, r.content
    result = r.json()["result"]
    assert [a["path"] for a in result["adopted"]] == ["extra.txt"]
    held = result["held"]
    assert [h["path"] for h in held] == ["report.md"] and held[0]["seqs"] == [4]
    assert Path(held[0]["copy"]).read_text() == "v1 + a person's fix\n"  # a copy is kept
    assert (old_workspace / "report.md").read_text() == "v1 + a person's fix\n"  # not overwritten
    action.refresh_from_db()
    assert action.status == "open" and "report.md" in r.json()["summary"]
    supervise_once()
    assert not Run.objects.filter(task=task, status="queued").exists()  # the continuation waits for it
    state = admin_api.get(f"/api/tasks/{task.pk}/workspace/").json()
    assert {f["path"]: f["status"] for f in state["files"]}["report.md"] == "held"

    r = repair(admin_api, action, "reissue")
    assert r.status_code == 202, r.content
    result = r.json()["result"]
    task.refresh_from_db()
    fresh = Path(task.workspace)
    assert fresh != old_workspace and result["old_workspace"] == str(old_workspace)
    assert contents(fresh) == {"report.md": b"v1\n", "notes.txt": b"notes\n", "extra.txt": b"added by hand\n"}
    assert {b["path"]: b["after"] for b in result["rebuilt"]}["report.md"] == sha("v1\n")
    assert (old_workspace / "report.md").read_text() == "v1 + a person's fix\n"  # the old one is kept
    assert HeldCopy.objects.filter(task=task, reason="reissue", path=str(old_workspace)).exists()
    action.refresh_from_db()
    assert action.status == "resolved" and action.resolution == "reissued"
    # Before the supervisor's next pass the task and its row say what is about to happen (issue 20, item 4).
    page = Client()
    page.force_login(admin_user)
    header = visible_text(outer_html(page.get(f"/tasks/{task.pk}/").content.decode(), f"task-{task.pk}"))
    row = visible_text(outer_html(page.get("/?state=all").content.decode(), f"task-{task.pk}"))
    for words in (header, row):
        assert "Nothing is scheduled" not in words, words
        assert f"Run #{source.pk} is taken up by the supervisor on its next pass" in words, words

    supervise_once()
    continuation = Run.objects.get(continues=source, status="queued")
    claim = e.claim(continuation)
    run_steps(claim)
    e.finish(claim)
    assert (fresh / "report.md").read_text() == "v2 by the plan\n"
    assert (old_workspace / "report.md").read_text() == "v1 + a person's fix\n"
    listing = admin_api.get(f"/api/tasks/{task.pk}/workspace/").json()
    assert any(c["path"] == str(old_workspace) for c in listing["held_copies"])
    copy = next(c for c in listing["held_copies"] if c["reason"] == "reissue")
    kept = admin_api.get(copy["url"]).json()
    assert kept["held"] is True and {f["path"] for f in kept["files"]} >= {"report.md", "extra.txt"}


def test_a_reissue_never_starts_when_recorded_content_was_not_kept(org, agent, admin_api, settings):
    settings.CONSOLE_WORKSPACE_KEEP_BYTES = 4
    task = e.start(org, PLAN)
    crash_at(e.first_run(task), 2)
    edit_by_hand(task, "draft.md", "changed\n")
    supervise_once()
    action = validation_action(task)
    before = contents(task.workspace)
    r = repair(admin_api, action, "reissue")
    assert r.status_code == 409 and r.json()["reason"] == "content_not_kept" and r.json()["files"] == ["draft.md"]
    task.refresh_from_db()
    assert contents(task.workspace) == before and not HeldCopy.objects.exists()
    assert action.evidence["files"][0]["diff_note"] == "not_kept"


def test_a_decision_that_a_cut_off_write_happened_takes_its_file_as_written(org, agent, operator):
    from recovery.actions.commands import action_decide

    task = e.start(org, [(W, {"path": "out.txt", "content": "hello"}), ("file_read", {"path": "out.txt"})])
    run = e.claim(e.first_run(task))
    e.plan_step(run, 1)
    e.dispatch_step(run, 1)
    Path(task.workspace, "out.txt").write_text("hello")  # the tool ran; the worker died before completing it
    e.lapse()
    supervise_once()
    action = RecoveryAction.objects.get(task=task, kind="unknown_outcome")
    action_decide(action_id=action.pk, user=operator, version=action.version, outcome="performed", note="it is there")
    action.refresh_from_db()
    assert action.status == "retrying"
    assert rows(task)["out.txt"].source == "decision" and rows(task)["out.txt"].seq == 1


def test_a_retry_refused_by_the_workspace_keeps_its_evidence_and_says_why(org, agent, operator, api):
    task = e.start(org, [(W, {"path": "a.txt", "content": "a"}), ("sleep", {"seconds": 0})], agent="builder")
    from tasks.models import AgentProfile

    AgentProfile.objects.filter(agent__name="builder").update(auto_resume=False)
    source = crash_at(e.first_run(task), 2)
    supervise_once()
    action = RecoveryAction.objects.get(task=task, kind="continuation")
    edit_by_hand(task, "a.txt", "b")
    r = api.post(
        f"/api/actions/{action.pk}/retry/", {"version": action.version}, format="json", HTTP_IDEMPOTENCY_KEY="k1"
    )
    assert r.status_code == 409, r.content
    body = r.json()
    assert body["code"] == "gate_closed" and body["gate"] == "workspace_hold"
    held = RecoveryAction.objects.get(pk=body["action"])
    assert held.kind == "workspace_validation" and held.run_id == body["run"]
    assert Run.objects.get(pk=body["run"]).continues_id == source.pk
    action.refresh_from_db()
    assert action.status == "open" and action.attempts == 0  # nothing was attempted
    # The next try is refused by the hold itself, naming who lifts it; nothing more is created.
    runs = Run.objects.count()
    r = api.post(f"/api/actions/{action.pk}/retry/", {"version": action.version}, format="json")
    assert r.status_code == 409 and r.json()["gate"] == "workspace_hold" and "Reconcile" in r.json()["lifted_by"]
    assert Run.objects.count() == runs
    detail = api.get(f"/api/actions/{action.pk}/").json()
    assert detail["gate"]["gate"] == "workspace_hold"
    # Continue now says the same.
    r = api.post(f"/api/tasks/{task.pk}/continue/", {}, format="json")
    assert r.status_code == 409 and r.json()["gate"] == "workspace_hold"


def test_a_follow_up_waits_with_the_workspace_hold(org, agent, operator, api):
    task = e.start(org, PLAN)
    crash_at(e.first_run(task), 2)
    edit_by_hand(task, "draft.md", "x")
    supervise_once()
    action = validation_action(task)
    r = api.post(f"/api/tasks/{task.pk}/messages/", {"body": "go on"}, format="json")
    assert r.status_code == 201
    supervise_once()
    message = api.get(f"/api/tasks/{task.pk}/").json()["messages"][0]
    assert message["status"] == "waiting"
    assert message["waiting_reason"].startswith("Waiting: workspace hold")
    assert f"Reconcile or Isolated reissue on recovery action #{action.pk}" in message["waiting_reason"]


def test_a_continue_now_that_finds_a_changed_workspace_is_refused_and_the_evidence_is_kept(org, agent, api):
    task = e.start(org, [(W, {"path": "a.txt", "content": "a"}), (W, {"path": "b.txt", "content": "b"})])
    run = e.claim(e.first_run(task))
    run_steps(run, 1)
    e.plan_step(run, 2)
    e.dispatch_step(run, 2)
    e.complete_step(run, 2, ok=False, error="disk full")
    e.finish(run, "failed")
    Path(task.workspace, "a.txt").unlink()
    r = api.post(f"/api/tasks/{task.pk}/continue/", {}, format="json", HTTP_IDEMPOTENCY_KEY="c1")
    assert r.status_code == 409 and r.json()["gate"] == "workspace_hold", r.content
    action = RecoveryAction.objects.get(pk=r.json()["action"])
    assert [(f["path"], f["status"]) for f in action.evidence["files"]] == [("a.txt", "missing")]
    assert "-a" in action.evidence["files"][0]["diff"]


# --- export ----------------------------------------------------------------------------------


def test_an_export_to_an_unwritable_destination_opens_an_action_and_retry_export_copies_once_fixed(
    org, agent, admin_api, tmp_path, export_root
):
    blocker = tmp_path / "exports"
    blocker.write_text("a file where the destination directory should be")
    dest = blocker / "release"
    task = e.start(org, [(W, {"path": "notes.md", "content": "# 1.4\n"}), (W, {"path": "d/x.txt", "content": "x"})])
    Task.objects.filter(pk=task.pk).update(export_destination=str(dest))
    finish_all(e.first_run(task))
    report = supervise_once()
    assert len(report.exported) == 1
    action = RecoveryAction.objects.get(task=task, kind="workspace_export")
    assert action.status == "open" and action.evidence["destination"] == str(dest)
    # The error names the file in the way, not the operating system's "Not a directory".
    said = f"{blocker} is a file, not a folder, and it is a parent of the destination {dest}"
    assert said in action.evidence["error"] and "Errno" not in action.evidence["error"]
    assert said in visible_text(export_card(task, action))
    assert not Export.objects.get().ok
    supervise_once()
    assert Export.objects.count() == 1  # exported once per run: the retry is a person's
    detail = admin_api.get(f"/api/tasks/{task.pk}/").json()
    # The run's work is done, but the failed export waits on an admin: the task says so everywhere.
    assert detail["state"] == "needs_decision" and detail["status"] == "done"
    assert [t["id"] for t in admin_api.get("/api/tasks/?state=needs_decision").json()["results"]] == [task.pk]
    assert admin_api.get("/api/tasks/?state=done").json()["results"] == []
    r = repair(admin_api, action, "retry_export")
    assert r.status_code == 202 and r.json()["status"] == "failed"
    assert RecoveryAction.objects.get(pk=action.pk).status == "open"
    card = export_card(task, action)
    assert "Retry export" in card and str(dest) in card and "Done" not in card

    blocker.unlink()  # the cause is fixed
    r = repair(admin_api, action, "retry_export")
    assert r.status_code == 202, r.content
    body = r.json()
    assert body["status"] == "done" and body["action"]["status"] == "resolved"
    assert body["result"]["counts"] == {"checked": 2, "copied": 2, "unchanged": 0, "kept": 0, "skipped": 0}
    assert "2 files copied to" in body["summary"]
    assert (dest / "notes.md").read_text() == "# 1.4\n" and (dest / "d" / "x.txt").read_text() == "x"
    assert {c["path"]: c["after"] for c in body["result"]["copied"]}["notes.md"] == sha("# 1.4\n")
    assert admin_api.get(f"/api/tasks/{task.pk}/").json()["state"] == "done"
    # The card shows the counts the copy saved, not only a changed label.
    card = export_card(task, action)
    assert "2 files copied to" in card and "Retry export" not in card.replace("Retry export by", "")


def export_card(task, action) -> str:
    client = Client()
    client.force_login(get_user_model().objects.get(username="ada"))
    return visible_text(outer_html(client.get(f"/tasks/{task.pk}/").text, f"action-{action.pk}"))


def test_an_export_keeps_destination_files_it_replaces_and_never_follows_links(org, agent, tmp_path, export_root):
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "a.txt").write_text("older, someone's")
    (dest / "same.txt").write_text("same")
    task = e.start(
        org,
        [
            (W, {"path": "a.txt", "content": "new"}),
            (W, {"path": "same.txt", "content": "same"}),
            ("bash", {"command": f"ln -s {tmp_path} escape"}),
        ],
    )
    Task.objects.filter(pk=task.pk).update(export_destination=str(dest))
    finish_all(e.first_run(task))
    supervise_once()
    export = Export.objects.get()
    assert export.ok, export.error
    counts = export.result["counts"]
    assert (counts["copied"], counts["unchanged"], counts["kept"], counts["skipped"]) == (1, 1, 1, 1)
    kept = Path(export.result["kept"][0]["copy"])
    assert kept.read_text() == "older, someone's" and (dest / "a.txt").read_text() == "new"
    assert not (dest / "escape").exists()


def test_an_export_destination_through_a_symlink_or_relative_is_refused(org, agent, tmp_path, export_root):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "via").symlink_to(real)
    cases = (
        (tmp_path / "via" / "out", "symbolic link"),
        ("relative/out", "absolute path"),
        ("s3://bucket/out", "local (or mounted) directories only"),
    )
    for dest, words in cases:
        task = e.start(org, [(W, {"path": "a.txt", "content": "a"})], title=str(dest))
        Task.objects.filter(pk=task.pk).update(export_destination=str(dest))
        finish_all(e.first_run(task))
        supervise_once()
        action = RecoveryAction.objects.get(task=task, kind="workspace_export")
        assert words in action.evidence["error"]
    assert not any(real.iterdir())


# --- authority, staleness, live writers -----------------------------------------------------------


@pytest.fixture
def diverged(org, agent):
    task = e.start(org, PLAN)
    crash_at(e.first_run(task), 2)
    edit_by_hand(task, "draft.md", "by hand\n")
    supervise_once()
    return task, validation_action(task)


def test_an_operator_cannot_repair_and_sees_no_controls(diverged, api, client, operator):
    task, action = diverged
    r = repair(api, action, "reconcile")
    assert r.status_code == 403 and r.json()["code"] == "forbidden"
    r = api.post(f"/api/actions/{action.pk}/repair-task/", {"agent": "builder"}, format="json")
    assert r.status_code == 403
    client.force_login(operator)
    page = client.get(f"/tasks/{task.pk}/").content.decode()
    assert "Confirm reconcile" not in page and "a workspace repair needs the admin role" in page
    r = client.post(
        f"/actions/{action.pk}/repair/",
        {"version": action.version, "repair": "reconcile", "run": action.run_id},
        HTTP_HX_REQUEST="true",
    )
    assert r.status_code == 403 and "needs the admin role" in r.content.decode()
    assert Repair.objects.count() == 0


def test_another_organization_gets_404(diverged, other_org):
    from tests.factories import make_member

    _, action = diverged
    stranger = token_client(user_token(make_member(other_org, "sam", "admin")))
    assert repair(stranger, action, "reconcile").status_code == 404
    assert stranger.get(f"/api/tasks/{action.task_id}/workspace/").status_code == 404


def test_a_stale_version_another_run_or_a_retired_action_is_refused_with_its_reason(diverged, admin_api):
    task, action = diverged
    before = contents(task.workspace)
    r = admin_api.post(
        f"/api/actions/{action.pk}/repair/",
        {"version": action.version - 1, "repair": "reconcile", "run": action.run_id},
        format="json",
    )
    assert r.status_code == 409 and r.json()["code"] == "stale_version"
    r = repair(admin_api, action, "reconcile", run=action.run.continues_id)
    assert r.status_code == 409 and r.json()["code"] == "stale_version" and "is about run" in r.json()["detail"]
    r = repair(admin_api, action, "retry_export")
    assert r.status_code == 400
    from django.db import transaction

    from recovery.actions.commands import action_retire

    with transaction.atomic():
        action_retire(action, reason="the test retired it")
    r = repair(admin_api, action, "reconcile")
    assert r.status_code == 409 and r.json()["reason"] == "retired"
    assert "the test retired it" in r.json()["detail"]
    assert Repair.objects.count() == 0 and contents(task.workspace) == before
    assert rows(task)["draft.md"].sha256 == sha("first draft\n")


def test_a_repair_is_refused_while_a_writer_holds_a_live_lease(diverged, admin_api, org):
    task, action = diverged
    r = admin_api.post(
        f"/api/actions/{action.pk}/repair-task/",
        {"agent": "builder", "title": "Fix the draft", "input": {"steps": [{"tool": "sleep", "args": {"seconds": 0}}]}},
        format="json",
    )
    assert r.status_code == 201, r.content
    repair_task = Task.objects.get(pk=r.json()["id"])
    assert repair_task.workspace == Task.objects.get(pk=task.pk).workspace
    writer = e.claim(e.first_run(repair_task))
    r = repair(admin_api, action, "reconcile")
    assert r.status_code == 409 and r.json()["code"] == "gate_closed" and r.json()["gate"] == "lease_live"
    assert r.json()["run"] == writer.pk and Repair.objects.count() == 0


def test_a_repair_task_returns_the_action_to_its_return_owner_when_done(diverged, admin_api, admin_user):
    _task, action = diverged
    r = admin_api.post(
        f"/api/actions/{action.pk}/repair-task/", {"agent": "builder", "return_owner": "ada"}, format="json"
    )
    assert r.status_code == 201, r.content
    action.refresh_from_db()
    assert action.recovery_owner == "agent:builder" and action.return_owner == "user:ada"
    card = admin_api.get(f"/api/actions/{action.pk}/").json()
    assert card["repair_task"] == r.json()["id"]
    run = Run.objects.get(task_id=r.json()["id"])
    e.finish(e.claim(run))  # an empty plan: the repair task is done
    action.refresh_from_db()
    assert action.recovery_owner == "user:ada" and action.status == "open"
    from recovery.api.shapes import action_view_of
    from recovery.words.lines import plain

    view = action_view_of(action, user=admin_user)
    assert "is done: this action is back with ada" in plain(view.repair_task)
    bad = admin_api.post(f"/api/actions/{action.pk}/repair-task/", {"agent": "nobody"}, format="json")
    assert bad.status_code == 404
    bad = admin_api.post(
        f"/api/actions/{action.pk}/repair-task/", {"agent": "builder", "return_owner": "olive"}, format="json"
    )
    assert bad.status_code == 400


def test_a_repair_with_the_same_idempotency_key_happens_once(diverged, admin_api):
    _, action = diverged
    body = {"version": action.version, "repair": "reconcile", "run": action.run_id}
    first = admin_api.post(f"/api/actions/{action.pk}/repair/", body, format="json", HTTP_IDEMPOTENCY_KEY="r1")
    again = admin_api.post(f"/api/actions/{action.pk}/repair/", body, format="json", HTTP_IDEMPOTENCY_KEY="r1")
    assert first.status_code == again.status_code == 202 and first.json() == again.json()
    assert Repair.objects.count() == 1


def test_a_symlink_a_person_added_is_listed_then_adopted_as_a_link_and_never_followed(org, agent, admin_api, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("not yours")
    task = e.start(org, PLAN)
    source = crash_at(e.first_run(task), 2)
    os.symlink(outside, Path(task.workspace) / "peek.txt")
    supervise_once()
    action = validation_action(task)
    f = action.evidence["files"][0]
    assert f["path"] == "peek.txt" and f["status"] == "added" and f["actual"]["kind"] == "link"
    assert f["actual"]["link"] == str(outside)
    assert f["actual"]["sha256"] is None and f["diff"] is None  # never read through
    r = repair(admin_api, action, "reconcile")
    result = r.json()["result"]
    assert result["held"] == [] and result["adopted"][0]["after"] == {"kind": "link", "link": str(outside)}
    assert (rows(task)["peek.txt"].kind, rows(task)["peek.txt"].link) == ("link", str(outside))
    assert outside.read_text() == "not yours"
    # The link is recorded: the next validation finds nothing to hold, and the continuation is admitted.
    report = supervise_once()
    assert Run.objects.get(pk=report.continued[0]).continues_id == source.pk


def test_the_workspace_api_lists_every_file_with_its_status(org, agent, api):
    task = e.start(org, [(W, {"path": "a.txt", "content": "a"}), (W, {"path": "b.txt", "content": "b"})])
    finish_all(e.first_run(task))
    edit_by_hand(task, "a.txt", "A")
    Path(task.workspace, "b.txt").unlink()
    edit_by_hand(task, "c.txt", "c")
    body = api.get(f"/api/tasks/{task.pk}/workspace/").json()
    assert body["path"] == Task.objects.get(pk=task.pk).workspace and body["held"] is False
    assert {f["path"]: f["status"] for f in body["files"]} == {"a.txt": "changed", "b.txt": "missing", "c.txt": "added"}
    a = next(f for f in body["files"] if f["path"] == "a.txt")
    assert a["recorded"]["sha256"] == sha("a") and a["actual"]["sha256"] == sha("A")
    assert a["written_by"] == {"run": e.first_run(task).pk, "seq": 1, "tool": W, "source": "step"}
    assert api.get(f"/api/tasks/{task.pk}/workspace/?held=../../etc").status_code == 400
    assert api.get(f"/api/tasks/{task.pk}/workspace/?held=999").status_code == 404


def test_a_new_task_never_reuses_a_leftover_directory(org, agent, settings):
    from tasks.services import workspace_path

    task = e.start(org, [("sleep", {"seconds": 0})])
    nxt = Task(pk=task.pk + 1, org=org)
    leftover = workspace_path(nxt)
    leftover.mkdir(parents=True, exist_ok=True)
    (leftover / "stale.txt").write_text("from an earlier database")
    second = e.start(org, [("sleep", {"seconds": 0})])
    assert second.pk == nxt.pk and Path(second.workspace) != leftover
    assert os.listdir(second.workspace) == [] and (leftover / "stale.txt").exists()


def test_an_unsafe_export_destination_is_refused_when_the_task_is_created(
    org, agent, api, tmp_path, settings, export_root
):
    (tmp_path / "via").symlink_to(tmp_path)
    inside = str(Path(settings.CONSOLE_WORKSPACES).resolve() / "acme" / "x")
    for dest in ("relative/out", "/tmp/../etc", str(tmp_path / "via" / "out"), inside, "/tmp/a\x00b"):
        body = {"title": "t", "agent": "builder", "input": {"steps": []}, "export_destination": dest}
        r = api.post("/api/tasks/", body, format="json")
        assert r.status_code == 400, (dest, r.content)
    assert not Task.objects.exists()
    ok = api.post(
        "/api/tasks/",
        {"title": "t", "agent": "builder", "input": {"steps": []}, "export_destination": str(tmp_path / "out")},
        format="json",
    )
    assert ok.status_code == 201
    assert api.get(f"/api/tasks/{ok.json()['id']}/").json()["export_destination"] == str(tmp_path / "out")


def test_start_over_waits_for_the_workspace_repair_too(diverged, api, client, operator):
    task, action = diverged
    client.force_login(operator)
    page = client.get(f"/tasks/{task.pk}/").content.decode()
    # The header does not offer what would be refused; it says what it waits for.
    assert f"Start over waits for the workspace repair on recovery action #{action.pk}" in visible_text(page)
    assert f'action="/tasks/{task.pk}/start-over/"' not in page
    r = api.post(f"/api/tasks/{task.pk}/start-over/", {"accept_duplicate_risk": True}, format="json")
    assert r.status_code == 409 and r.json()["gate"] == "workspace_hold", r.content
    action.refresh_from_db()
    assert action.status == "open"  # not retired: the files it lists still wait for an admin


def test_inputs_a_person_put_in_the_workspace_before_the_first_run_are_its_baseline(org, agent):
    task = e.start(org, PLAN)
    Path(task.workspace, "input.csv").write_text("a,b\n")  # seeded before any run started
    source = crash_at(e.first_run(task), 2)
    assert rows(task)["input.csv"].source == "baseline"
    report = supervise_once()
    assert len(report.continued) == 1 and not RecoveryAction.objects.filter(task=task).exists()
    assert Run.objects.get(pk=report.continued[0]).continues_id == source.pk


def test_a_seeded_input_changed_after_the_crash_is_a_difference(org, agent):
    task = e.start(org, PLAN)
    Path(task.workspace, "input.csv").write_text("a,b\n")
    crash_at(e.first_run(task), 2)
    edit_by_hand(task, "input.csv", "a,b,c\n")
    supervise_once()
    f = validation_action(task).evidence["files"][0]
    assert f["path"] == "input.csv" and f["recorded"]["source"] == "baseline"
    assert "+a,b,c" in f["diff"]


def test_a_run_whose_continuation_the_workspace_refused_never_reads_as_continuing_automatically(
    diverged, admin_user, client
):
    task, action = diverged
    source = action.run.continues
    client.force_login(admin_user)
    page = visible_text(client.get(f"/agents/{source.agent.name}/runs/{source.pk}/").content.decode())
    assert "Safe to continue automatically" not in page
    assert f"its continuation run #{action.run_id} was not admitted: the workspace differs" in page
    # A workspace action waits for an admin's repair and never ages into exhaustion: it has no due time.
    assert action.due_at is None
    inbox = visible_text(client.get("/inbox/").content.decode())
    assert f"#{task.pk}" in inbox and "due" not in inbox


def test_a_text_file_under_64_kib_gets_a_diff_and_one_over_it_is_listed_without_one(org, agent):
    from recovery.rules.workspace_diff import DIFF_LIMIT

    small, large = "a" * 100 + "\n", "b" * (DIFF_LIMIT - 10) + "\n"
    task = e.start(
        org,
        [(W, {"path": "small.txt", "content": small}), (W, {"path": "large.txt", "content": large}), e.SAFE],
    )
    crash_at(e.first_run(task), 3)
    edit_by_hand(task, "small.txt", small + "by hand\n")
    edit_by_hand(task, "large.txt", large + "x" * 20 + "\n")  # now just over 64 KiB
    supervise_once()
    files = {f["path"]: f for f in validation_action(task).evidence["files"]}
    assert files["small.txt"]["status"] == "changed" and "+by hand" in files["small.txt"]["diff"]
    assert files["large.txt"]["status"] == "changed" and files["large.txt"]["actual"]["size"] > DIFF_LIMIT
    assert files["large.txt"]["diff"] is None and files["large.txt"]["diff_note"] == "binary_or_large"
    assert files["large.txt"]["actual"]["sha256"] == sha(large + "x" * 20 + "\n")


def test_a_decision_whose_continuation_finds_a_changed_workspace_is_refused_and_keeps_the_decision_open(
    org, agent, operator, api
):
    task = e.start(org, [(W, {"path": "a.txt", "content": "a"}), (W, {"path": "b.txt", "content": "b"}), e.SAFE])
    source = crash_at(e.first_run(task), 2)  # a file_write cut off: an unknown outcome, a person decides
    supervise_once()
    action = RecoveryAction.objects.get(task=task, kind="unknown_outcome")
    edit_by_hand(task, "a.txt", "changed by hand")
    body = {"version": action.version, "outcome": "performed", "note": "b.txt is there"}
    r = api.post(f"/api/actions/{action.pk}/decision/", body, format="json")
    assert r.status_code == 409, r.content
    assert r.json()["code"] == "gate_closed" and r.json()["gate"] == "workspace_hold"
    held = validation_action(task)
    assert held.run.continues_id == source.pk and held.run.error_code == "workspace_validation_failed"
    assert {f["path"] for f in held.evidence["files"] if f["status"] == "changed"} == {"a.txt"}
    action.refresh_from_db()
    # Nothing was decided: the person's decision waits for the repair, and no run started.
    assert action.status == "open" and action.decision == "" and action.attempts == 0
    assert not Run.objects.filter(task=task, started_at__isnull=False).exclude(pk=source.pk).exists()
