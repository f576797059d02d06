"""Recovery actions through the operator API: cards, versions, decisions, retries, exhaustion, retirement."""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from recovery.models import RecoveryAction, RecoveryAttempt
from recovery.supervisor.loop import supervise_once
from tasks import services
from tasks.models import Event, Run, Step, Task
from tests.factories import make_agent, make_member, user_token
from tests.recovery import engine as e

pytestmark = pytest.mark.django_db

STEPS = [e.SAFE, e.WRITE, e.SAFE]  # crashing at 2 leaves a file_write of unknown outcome
ACTION_FIELDS = {
    "id",
    "task",
    "run",
    "kind",
    "status",
    "cause",
    "evidence",
    "original_owner",
    "recovery_owner",
    "attempts",
    "max_attempts",
    "next_action",
    "gate",
    "version",
    "attempt_history",
    "repairs",
}
ATTEMPT_FIELDS = {"number", "requested_by", "requested_at", "acknowledged_at", "continuation_run", "outcome"}


@pytest.fixture
def parked(org, agent) -> RecoveryAction:
    """An open unknown-outcome action: step 2 (file_write) was dispatched, then the worker died."""
    return e.parked(org, STEPS, 2)


def card(api, action) -> dict:
    r = api.get(f"/api/actions/{action.pk}/")
    assert r.status_code == 200, r.content
    return r.json()


def retry(client, action, version=None, **extra):
    version = action.version if version is None else version
    return client.post(f"/api/actions/{action.pk}/retry/", {"version": version, **extra}, format="json")


def decide(client, action, outcome, note="", version=None, **extra):
    version = action.version if version is None else version
    body = {"version": version, "outcome": outcome, "note": note, **extra}
    return client.post(f"/api/actions/{action.pk}/decision/", body, format="json")


def cancel(client, action, version=None):
    version = action.version if version is None else version
    return client.post(f"/api/actions/{action.pk}/cancel/", {"version": version}, format="json")


def assert_error(r, status: int, code: str) -> dict:
    assert r.status_code == status, r.content
    assert r.json()["code"] == code, r.json()
    return r.json()


def continuation_of(action) -> Run:
    return RecoveryAttempt.objects.get(action=action).continuation_run


# --- the card ------------------------------------------------------------------------------


def test_an_unknown_outcome_card_has_every_documented_field_and_names_the_exact_operation(api, parked):
    body = card(api, parked)
    assert set(body) >= ACTION_FIELDS
    source = Run.objects.get(pk=parked.run_id)
    assert body["id"] == parked.pk and body["task"] == source.task_id and body["run"] == source.pk
    assert (body["kind"], body["status"], body["cause"]) == ("unknown_outcome", "open", "unknown_outcome")
    assert body["original_owner"] == "builder" and body["recovery_owner"] == "role:operator"
    assert body["attempts"] == 0 and body["max_attempts"] >= 1
    assert body["next_action"] and body["gate"] is None and body["version"] == parked.version
    assert body["attempt_history"] == [] and body["repairs"] == []
    step = Step.objects.get(run=source, seq=2)
    evidence = body["evidence"]
    assert evidence["seq"] == 2 and evidence["tool"] == "file_write"
    assert evidence["args"] == {"path": "report.md", "content": "# Report"}
    assert evidence["dispatched_at"] == step.dispatched_at.isoformat()
    assert [r["code"] for r in evidence["reasons"]] == ["unknown_outcome"]


def test_an_action_of_another_organization_is_not_found_for_every_verb(parked, other_org, make_token_client):
    gus = make_token_client(user_token(make_member(other_org, "gus", "admin")))
    before = e.state(parked)
    for r in (
        gus.get(f"/api/actions/{parked.pk}/"),
        retry(gus, parked, accept_duplicate_risk=True),
        decide(gus, parked, "performed", note="x"),
        cancel(gus, parked),
    ):
        assert_error(r, 404, "not_found")
        assert "report.md" not in r.content.decode()
    assert e.state(parked) == before


def test_a_viewer_reads_the_card_but_may_not_act_on_it(parked, viewer, make_token_client):
    client = make_token_client(user_token(viewer))
    assert card(client, parked)["status"] == "open"
    before = e.state(parked)
    for r in (
        retry(client, parked, accept_duplicate_risk=True),
        decide(client, parked, "performed", note="x"),
        cancel(client, parked),
    ):
        assert_error(r, 403, "forbidden")
    assert e.state(parked) == before


# --- versions --------------------------------------------------------------------------------


def test_a_stale_version_is_refused_and_changes_nothing(api, parked):
    old = parked.version
    assert decide(api, parked, "unresolved", note="asked the owner").status_code == 200
    parked.refresh_from_db()
    assert parked.version == old + 1
    before = e.state(parked)
    for r in (
        retry(api, parked, version=old, accept_duplicate_risk=True),
        decide(api, parked, "performed", note="x", version=old),
        cancel(api, parked, version=old),
    ):
        body = assert_error(r, 409, "stale_version")
        assert body["current_version"] == parked.version
    assert e.state(parked) == before


# --- cancel ----------------------------------------------------------------------------------


def test_cancel_closes_the_action_and_nothing_continues_afterwards(api, parked):
    r = cancel(api, parked)
    assert r.status_code == 200, r.content
    assert r.json()["status"] == "cancelled"
    runs = Run.objects.count()
    supervise_once()
    assert Run.objects.count() == runs
    assert RecoveryAction.objects.get(pk=parked.pk).status == "cancelled"
    assert not RecoveryAttempt.objects.exists()


def test_cancelling_a_retrying_action_cancels_its_queued_continuation(api, parked):
    assert retry(api, parked, accept_duplicate_risk=True).status_code == 202
    parked.refresh_from_db()
    continuation = continuation_of(parked)
    assert continuation.status == "queued"

    r = cancel(api, parked)
    assert r.status_code == 200, r.content
    assert r.json()["status"] == "cancelled"
    continuation.refresh_from_db()
    assert continuation.status == "cancelled"
    assert services.run_claim(worker=e.worker(parked.org), label="x") is None
    assert RecoveryAttempt.objects.get(action=parked).outcome == "rejected"


# --- decisions -------------------------------------------------------------------------------


def test_unresolved_keeps_the_action_parked(api, parked):
    runs = Run.objects.count()
    r = decide(api, parked, "unresolved", note="asked the owner, no answer yet")
    assert r.status_code == 200, r.content
    assert r.json()["status"] == "open"
    assert Run.objects.count() == runs
    assert not RecoveryAttempt.objects.exists()
    supervise_once()
    assert Run.objects.count() == runs
    assert RecoveryAction.objects.get(pk=parked.pk).status == "open"


def test_performed_continues_with_the_note_as_the_steps_saved_result(api, parked):
    r = decide(api, parked, "performed", note="report.md is on disk with the right content")
    assert r.status_code == 200, r.content
    assert r.json()["status"] == "retrying"
    assert [a["decision"] for a in r.json()["attempt_history"]] == ["performed"]
    assert RecoveryAttempt.objects.filter(action=parked).count() == 1
    continuation = continuation_of(parked)

    run = api.get(f"/api/runs/{continuation.pk}/").json()
    assert run["continues"] == parked.run_id and run["status"] == "queued"
    steps = {s["seq"]: s for s in run["steps"]}
    assert sorted(steps) == [1, 2]
    assert steps[1]["reused"] is True and steps[2]["reused"] is True
    assert steps[2]["phase"] == "completed"
    assert "report.md is on disk with the right content" in str(steps[2]["result"])

    # The worker is handed the decided outcome and runs only what is left.
    run = e.claim(continuation)
    assert e.next_seq(run) == 3
    e.advance(run, 3)
    e.finish(run)
    supervise_once()
    parked.refresh_from_db()
    assert parked.status == "resolved" and parked.resolution == "continued"
    assert Step.objects.filter(run=continuation, seq=2, dispatch_epoch__isnull=False).count() == 0


def test_not_performed_reruns_the_step_only_with_the_duplicate_risk_accepted(api, parked):
    before = e.state(parked)
    assert_error(decide(api, parked, "not_performed", note="not on disk"), 409, "not_eligible")
    assert e.state(parked) == before
    r = decide(api, parked, "not_performed", note="not on disk", accept_duplicate_risk=True)
    assert r.status_code == 200, r.content
    attempt = RecoveryAttempt.objects.get(action=parked)
    assert attempt.accepted_duplicate_risk and attempt.decision == "not_performed"
    steps = Step.objects.filter(run=attempt.continuation_run).order_by("seq")
    assert [(s.seq, s.reused_from_id is not None) for s in steps] == [(1, True)]


def test_a_decision_on_an_action_that_is_not_about_an_unknown_outcome_is_refused(api, org):
    make_agent(org, "careful", auto_resume=False)
    action = e.parked(org, [e.SAFE, e.SAFE], 2, agent="careful")
    assert action.kind == "continuation"
    before = e.state(action)
    assert_error(decide(api, action, "performed", note="x"), 409, "not_eligible")
    assert e.state(action) == before


# --- retry -----------------------------------------------------------------------------------


def test_retrying_an_unknown_outcome_needs_the_duplicate_risk_accepted(api, parked):
    before = e.state(parked)
    body = assert_error(retry(api, parked), 409, "not_eligible")
    assert body.get("seq") == 2
    assert e.state(parked) == before

    r = retry(api, parked, accept_duplicate_risk=True)
    assert r.status_code == 202, r.content
    attempt = r.json()
    assert attempt["number"] == 1 and attempt["outcome"] == "requested" and attempt["accepted_duplicate_risk"]
    assert attempt["requested_by"] == "olive"
    assert Run.objects.filter(continues_id=parked.run_id).count() == 1
    assert RecoveryAttempt.objects.filter(action=parked).count() == 1
    assert attempt["continuation_run"] == continuation_of(parked).pk
    # The operation of unknown outcome is rerun, not carried.
    steps = api.get(f"/api/runs/{attempt['continuation_run']}/").json()["steps"]
    assert [(s["seq"], s["reused"]) for s in steps] == [(1, True)]

    # Asking again with the card's new version admits nothing more: the action is retrying.
    parked.refresh_from_db()
    before = e.state(parked)
    assert_error(retry(api, parked, accept_duplicate_risk=True), 409, "not_eligible")
    assert_error(decide(api, parked, "performed", note="x"), 409, "not_eligible")
    assert e.state(parked) == before


def test_a_retry_is_acknowledged_first_and_resolved_only_once_its_run_has_started(api, parked):
    r = retry(api, parked, accept_duplicate_risk=True)
    assert r.status_code == 202
    parked.refresh_from_db()
    attempt = RecoveryAttempt.objects.get(action=parked)
    assert attempt.acknowledged_at is not None and attempt.continuation_run_id is not None
    assert attempt.requested_at <= attempt.acknowledged_at  # acknowledged when it was asked, never before
    assert attempt.outcome == "requested"
    assert parked.status == "retrying"

    supervise_once()  # queued, not started: nothing is claimed to have continued
    parked.refresh_from_db()
    assert parked.status == "retrying"
    assert card(api, parked)["attempt_history"][0]["outcome"] == "requested"

    e.claim(attempt.continuation_run)
    supervise_once()
    parked.refresh_from_db()
    assert parked.status == "resolved" and parked.resolution == "continued"
    history = card(api, parked)["attempt_history"]
    assert len(history) == 1 and set(history[0]) >= ATTEMPT_FIELDS
    assert history[0]["outcome"] == "continued" and history[0]["continuation_run"] == attempt.continuation_run_id


def test_a_retry_refused_at_admission_reopens_the_action_and_says_which_gate(api, parked):
    assert retry(api, parked, accept_duplicate_risk=True).status_code == 202
    continuation = continuation_of(parked)
    assert api.post(f"/api/tasks/{parked.task_id}/pause/").status_code == 200
    assert services.run_claim(worker=e.worker(parked.org), label="x") is None  # the claim skips a paused task

    supervise_once()
    continuation.refresh_from_db()
    assert continuation.status == "cancelled"
    attempt = RecoveryAttempt.objects.get(action=parked)
    assert attempt.outcome == "rejected" and attempt.rejected_gate == "task_paused"
    parked.refresh_from_db()
    assert parked.status == "open", (parked.status, parked.resolution_note)
    body = card(api, parked)
    assert body["status"] == "open"
    assert body["gate"]["gate"] == "task_paused" and body["gate"]["lifted_by"]
    assert body["attempt_history"][0]["outcome"] == "rejected"


def test_after_a_refused_admission_the_lifted_gate_admits_a_second_attempt(api, parked):
    assert retry(api, parked, accept_duplicate_risk=True).status_code == 202
    api.post(f"/api/tasks/{parked.task_id}/pause/")
    supervise_once()
    api.post(f"/api/tasks/{parked.task_id}/resume-task/")
    parked.refresh_from_db()
    assert parked.status == "open", (parked.status, parked.resolution_note)

    r = retry(api, parked, accept_duplicate_risk=True)
    assert r.status_code == 202, r.content
    assert r.json()["number"] == 2
    second = Run.objects.get(pk=r.json()["continuation_run"])
    assert second.status == "queued"
    e.claim(second)
    supervise_once()
    parked.refresh_from_db()
    assert parked.status == "resolved"
    assert list(parked.attempt_history.order_by("number").values_list("outcome", flat=True)) == [
        "rejected",
        "continued",
    ]


def test_a_continuation_stopped_before_it_started_is_never_reported_as_continued(api, parked):
    assert retry(api, parked, accept_duplicate_risk=True).status_code == 202
    continuation = continuation_of(parked)
    r = api.post(f"/api/runs/{continuation.pk}/stop/")
    assert r.status_code == 200 and r.json()["status"] == "stopped"
    continuation.refresh_from_db()
    assert continuation.started_at is None

    supervise_once()
    parked.refresh_from_db()
    attempt = RecoveryAttempt.objects.get(action=parked)
    assert attempt.outcome != "continued", "the continuation never started"
    assert parked.resolution != "continued"
    assert card(api, parked)["attempt_history"][0]["outcome"] != "continued"


def test_the_same_retry_sent_twice_with_one_idempotency_key_admits_once(api, parked):
    body = {"version": parked.version, "accept_duplicate_risk": True}
    url = f"/api/actions/{parked.pk}/retry/"
    first = api.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="retry-1")
    second = api.post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="retry-1")
    assert first.status_code == second.status_code == 202
    assert first.json() == second.json()
    assert RecoveryAttempt.objects.filter(action=parked).count() == 1
    assert Run.objects.filter(continues_id=parked.run_id).count() == 1


# --- exhaustion ------------------------------------------------------------------------------


def test_an_overdue_action_is_exhausted_and_only_an_admin_with_a_reason_grants_one_more(
    api, parked, admin_user, make_token_client
):
    RecoveryAction.objects.filter(pk=parked.pk).update(due_at=timezone.now() - timedelta(minutes=1))
    supervise_once()
    parked.refresh_from_db()
    assert parked.status == "exhausted"
    body = card(api, parked)
    assert body["status"] == "exhausted" and body["recovery_owner"] == "role:admin"
    assert "admin" in body["next_action"]

    before = e.state(parked)
    assert_error(retry(api, parked, accept_duplicate_risk=True, reason="please"), 403, "forbidden")
    admin = make_token_client(user_token(admin_user))
    assert_error(retry(admin, parked, accept_duplicate_risk=True), 400, "invalid")
    assert_error(retry(admin, parked, accept_duplicate_risk=True, reason="   "), 400, "invalid")
    assert e.state(parked) == before

    r = retry(admin, parked, accept_duplicate_risk=True, reason="checked with the owner; safe to rewrite")
    assert r.status_code == 202, r.content
    assert r.json()["requested_by"] == "ada"
    parked.refresh_from_db()
    assert parked.status == "retrying" and parked.attempts == 1
    assert RecoveryAttempt.objects.filter(action=parked).count() == 1
    # The grant and the retry it admits are one change, recorded by one event with its reason.
    granted = Event.objects.get(kind="action_retry_requested", payload__action=parked.pk)
    assert granted.actor == "ada" and granted.payload["granted"] == "checked with the owner; safe to rewrite"
    assert parked.exhaustion == "" and parked.max_attempts == 1


# --- stale actions ---------------------------------------------------------------------------


def test_an_action_whose_run_was_superseded_is_retired_by_reading_the_task(api, parked):
    task = Task.objects.get(pk=parked.task_id)
    newer = services.run_enqueue(task=task, actor="olive", input=Run.objects.get(pk=parked.run_id).input)
    runs, attempts = Run.objects.count(), RecoveryAttempt.objects.count()

    detail = api.get(f"/api/tasks/{task.pk}/").json()
    parked.refresh_from_db()
    assert parked.status == "retired" and parked.resolution == "retired"
    assert [a["status"] for a in detail["actions"]] == ["retired"]
    assert detail["current_run"] == newer.pk
    assert (Run.objects.count(), RecoveryAttempt.objects.count()) == (runs, attempts)
    # A retired card grants nothing: no retry, no decision.
    assert_error(retry(api, parked, accept_duplicate_risk=True), 409, "not_eligible")
    assert_error(decide(api, parked, "performed", note="x"), 409, "not_eligible")
    assert (Run.objects.count(), RecoveryAttempt.objects.count()) == (runs, attempts)


def test_an_action_of_a_closed_task_is_retired_by_reading_its_card(api, parked):
    Task.objects.filter(pk=parked.task_id).update(status="done")
    runs = Run.objects.count()
    body = card(api, parked)
    assert body["status"] == "retired"
    assert Run.objects.count() == runs and not RecoveryAttempt.objects.exists()


# --- reading changes nothing -----------------------------------------------------------------


def read_everything(api, task_id: int) -> None:
    for url in (f"/api/tasks/{task_id}/", "/api/tasks/", "/api/tasks/?state=needs_decision", "/api/tasks/?state=all"):
        assert api.get(url).status_code == 200
    for run_id in Run.objects.filter(task_id=task_id).values_list("pk", flat=True):
        assert api.get(f"/api/runs/{run_id}/").status_code == 200
    for action_id in RecoveryAction.objects.filter(task_id=task_id).values_list("pk", flat=True):
        assert api.get(f"/api/actions/{action_id}/").status_code == 200


def test_reading_an_interrupted_run_opens_no_action_and_starts_no_run(api, org, agent):
    run = e.interrupted(org, STEPS, 2)
    before = e.counts()
    read_everything(api, run.task_id)
    assert e.counts() == before
    diagnosis = api.get(f"/api/runs/{run.pk}/").json()["diagnosis"]
    assert diagnosis["disposition"] == "needs_decision"


def test_reading_an_open_or_retrying_action_creates_nothing(api, parked):
    before = e.counts()
    read_everything(api, parked.task_id)
    assert e.counts() == before
    assert retry(api, parked, accept_duplicate_risk=True).status_code == 202
    before = e.counts()
    read_everything(api, parked.task_id)
    assert e.counts() == before


# --- auto-resume off -------------------------------------------------------------------------


def test_with_auto_resume_off_a_safe_run_waits_for_a_person_then_continues(api, org):
    call_command("add_agent", org.slug, "careful", "--no-auto-resume", stdout=StringIO())
    run = e.interrupted(org, [e.SAFE, e.SAFE, e.SAFE], 2, agent="careful")
    supervise_once()
    assert not Run.objects.filter(continues=run).exists()
    action = RecoveryAction.objects.get(run=run)
    assert (action.kind, action.status, action.cause) == ("continuation", "open", "auto_resume_off")
    assert api.get(f"/api/tasks/{run.task_id}/").json()["state"] == "needs_decision"

    r = retry(api, action)  # every step is safe: no duplicate risk to accept
    assert r.status_code == 202, r.content
    continuation = Run.objects.get(continues=run)
    assert r.json()["continuation_run"] == continuation.pk
    steps = Step.objects.filter(run=continuation).order_by("seq")
    assert [(s.seq, s.reused_from_id is not None) for s in steps] == [(1, True)]
    e.run_to_end(continuation)
    supervise_once()
    action.refresh_from_db()
    assert action.status == "resolved"
    assert api.get(f"/api/tasks/{run.task_id}/").json()["state"] == "done"


# --- runs that cannot be continued, and failed steps -------------------------------------------


def test_a_run_whose_checkpoint_was_too_large_is_not_continued_and_the_card_says_why(api, org, agent):
    task = e.start(org, [e.SAFE, e.SAFE, e.SAFE])
    run = e.claim(e.first_run(task))
    e.plan_step(run, 1)
    e.dispatch_step(run, 1)
    services.step_complete(
        worker=run.lease_worker,
        run_id=run.pk,
        epoch=run.lease_epoch,
        seq=1,
        ok=True,
        result=None,
        result_too_large=True,
    )
    e.plan_step(run, 2)
    e.dispatch_step(run, 2)  # execution went on
    e.lapse()
    supervise_once()
    action = RecoveryAction.objects.get(run=run)
    assert (action.status, action.cause) == ("open", "checkpoint_too_large")
    reasons = card(api, action)["evidence"]["reasons"]
    assert reasons[0]["code"] == "checkpoint_too_large" and "8 MiB" in reasons[0]["detail"]

    before = e.state(action)
    body = assert_error(retry(api, action, accept_duplicate_risk=True), 409, "not_eligible")
    assert body["reason"] == "checkpoint_too_large"
    assert e.state(action) == before
    assert cancel(api, action).json()["status"] == "cancelled"


def test_a_contradictory_checkpoint_is_never_replayed(api, org, agent):
    run = e.interrupted(org, [e.SAFE, e.SAFE, e.SAFE], 3)
    Step.objects.filter(run=run, seq=2).update(tool="bash")  # the checkpoint disagrees with the plan
    supervise_once()
    assert not Run.objects.filter(continues=run).exists()
    action = RecoveryAction.objects.get(run=run)
    assert (action.status, action.cause) == ("open", "corrupt_checkpoint")
    assert [(r["code"], r.get("seq")) for r in action.evidence["reasons"]] == [("plan_mismatch", 2)]
    before = e.state(action)
    assert_error(retry(api, action, accept_duplicate_risk=True), 409, "not_eligible")
    assert e.state(action) == before


def test_a_failed_step_parks_the_run_and_a_retry_reruns_it(api, org, agent):
    task = e.start(org, [e.SAFE, e.SAFE, e.SAFE])
    run = e.claim(e.first_run(task))
    e.do_step(run, 1)
    e.plan_step(run, 2)
    e.dispatch_step(run, 2)
    e.complete_step(run, 2, ok=False, error="timed out")
    e.lapse()
    supervise_once()
    action = RecoveryAction.objects.get(run=run)
    assert (action.kind, action.cause, action.seq) == ("continuation", "step_failed", 2)
    assert "timed out" in action.evidence["reasons"][0]["detail"]

    r = retry(api, action)
    assert r.status_code == 202, r.content
    steps = Step.objects.filter(run_id=r.json()["continuation_run"]).order_by("seq")
    assert [(s.seq, s.reused_from_id is not None) for s in steps] == [(1, True)]


def test_a_settled_action_cannot_be_cancelled(api, parked):
    decide(api, parked, "performed", note="on disk")
    e.claim(continuation_of(parked))
    supervise_once()
    parked.refresh_from_db()
    assert parked.status == "resolved"
    before = e.state(parked)
    assert_error(cancel(api, parked), 409, "not_eligible")
    assert e.state(parked) == before
