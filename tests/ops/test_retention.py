"""Retention: a supervisor pass purges step payloads of runs that ended before the retention period."""

from datetime import timedelta

import pytest
from django.utils import timezone

from recovery.models import RecoveryAction
from recovery.rules import classify as c
from recovery.selectors import diagnose
from recovery.supervisor.loop import supervise_once
from tasks.models import Event, IdempotencyRecord, Run, Step
from tasks.services import task_pause, task_resume
from tests.processes import manage
from tests.recovery.engine import SAFE, WRITE, claim, first_run, interrupted, lapse, parked, run_to_end, start

pytestmark = pytest.mark.django_db


def age(run: Run, days: int) -> None:
    """Pretend the run ended `days` ago."""
    Run.objects.filter(pk=run.pk).update(finished_at=timezone.now() - timedelta(days=days))


def test_a_pass_purges_payloads_of_old_runs_only_and_records_it_on_the_run(org, agent, settings):
    settings.CONSOLE_CHECKPOINT_RETENTION_DAYS = 30
    old = run_to_end(first_run(start(org, [SAFE, WRITE], title="old")))
    recent = run_to_end(first_run(start(org, [SAFE, WRITE], title="recent")))
    live = claim(first_run(start(org, [SAFE], title="live")))
    age(old, 31)
    age(recent, 29)
    Run.objects.filter(pk=live.pk).update(started_at=timezone.now() - timedelta(days=40))

    report = supervise_once(label="sup-a")

    assert report.purged == [old.pk]
    old.refresh_from_db()
    assert old.checkpoint_purged_at is not None
    assert list(Step.objects.filter(run=old).values_list("seq", "tool", "phase", "args", "result")) == [
        (1, "sleep", "completed", {}, None),
        (2, "file_write", "completed", {}, None),
    ]
    assert Step.objects.get(run=recent, seq=2).args == WRITE[1]
    event = Event.objects.get(run=old, kind="checkpoint_purged")
    assert event.actor == "supervisor" and event.payload["steps"] == 2 and event.payload["retention_days"] == 30
    # Once is enough.
    assert supervise_once(label="sup-a").purged == []
    assert Event.objects.filter(kind="checkpoint_purged").count() == 1


def test_a_purged_runs_action_events_and_pages_still_read(org, agent, operator, api, client):
    action = parked(org, [SAFE, WRITE], 2)  # an unknown outcome of the file_write, waiting for a person
    run = action.run
    events = list(Event.objects.filter(task=run.task).values_list("id", "kind"))
    age(run, 31)
    supervise_once(label="sup-a")
    run.refresh_from_db()
    assert run.checkpoint_purged_at is not None

    # The action keeps its evidence (the exact call), the events are all there.
    body = api.get(f"/api/actions/{action.pk}/").json()
    assert body["status"] == "open" and body["cause"] == "unknown_outcome"
    assert body["evidence"]["tool"] == "file_write" and body["evidence"]["args"] == WRITE[1]
    feed = api.get(f"/api/events/?task={run.task_id}").json()["results"]
    assert [(e["id"], e["kind"]) for e in feed][: len(events)] == events
    assert feed[-1]["kind"] == "checkpoint_purged"

    # The run explains itself instead of failing.
    detail = api.get(f"/api/runs/{run.pk}/").json()
    assert detail["checkpoint_purged_at"] and detail["steps"][1]["args"] == {}
    assert detail["diagnosis"]["disposition"] == "needs_decision"
    assert [r["code"] for r in detail["diagnosis"]["reasons"]] == ["checkpoint_purged"]
    client.force_login(operator)
    page = client.get(f"/agents/builder/runs/{run.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Checkpoint purged on <time" in html and "checkpoint_purged" in html
    # The reason says when in words, never as an ISO time, and keeps its code out of the sentence.
    from tests.helpers import visible_text

    said = visible_text(html)
    assert "Its saved checkpoints were purged on " in said and run.checkpoint_purged_at.isoformat() not in said
    assert "checkpoint_purged" not in said
    assert client.get(f"/tasks/{run.task_id}/").status_code == 200

    # Deciding it can no longer continue from a checkpoint that is gone: refused, saying why.
    refused = api.post(
        f"/api/actions/{action.pk}/decision/",
        {"version": body["version"], "outcome": "performed", "note": "it happened"},
        format="json",
    )
    assert refused.status_code == 409 and refused.json()["reason"] == "checkpoint_purged"
    assert Run.objects.filter(task=run.task).count() == 1


def test_a_held_run_purged_before_its_hold_lifted_opens_an_action_that_says_so(org, agent):
    task = start(org, [SAFE, SAFE])
    run = claim(first_run(task))
    task_pause(actor="olive", task=task)  # running -> stopping; the worker is gone, so the lapse is the receipt
    lapse()
    run.refresh_from_db()
    assert run.status == "stopped" and run.stop_reason == "paused"
    supervise_once(label="sup-a")
    assert not RecoveryAction.objects.filter(run=run).exists()  # the pause holds it
    age(run, 31)
    supervise_once(label="sup-a")
    task_resume(actor="olive", task=task)

    supervise_once(label="sup-a")

    action = RecoveryAction.objects.get(run=run)
    assert action.cause == "checkpoint_purged" and action.status == "open"
    assert action.evidence["reasons"][0]["code"] == "checkpoint_purged"
    assert not Run.objects.filter(continues=run).exists()


def test_classify_a_purged_checkpoint_explicitly():
    facts = c.RunFacts(
        run_id=1,
        status="interrupted",
        plan={"steps": [{"tool": "file_write", "args": {}}]},
        steps=(c.StepFacts(1, "file_write", {}, "dispatched", "notify", dispatched_at=timezone.now()),),
        checkpoint_purged="Its saved checkpoints were purged (retention).",
    )
    diagnosis = c.classify(facts)
    assert diagnosis.disposition == c.NEEDS_DECISION
    assert [r.code for r in diagnosis.reasons] == ["checkpoint_purged"]


def test_a_purged_runs_diagnosis_from_the_database(org, agent):
    run = interrupted(org, [SAFE, SAFE], 2)
    Run.objects.filter(pk=run.pk).update(checkpoint_purged_at=timezone.now())
    run.refresh_from_db()
    assert [r.code for r in diagnose(run).reasons] == ["checkpoint_purged"]


@pytest.mark.slow
def test_the_retention_is_read_from_the_environment():
    out = manage(
        "shell",
        "-c",
        "from django.conf import settings; print(settings.CONSOLE_CHECKPOINT_RETENTION_DAYS)",
        env={"CONSOLE_CHECKPOINT_RETENTION_DAYS": "7"},
    )
    assert out.stdout.strip().splitlines()[-1] == "7"


def keyed(client, path: str, body: dict, key: str):
    return client.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY=key)


def test_idempotency_records_expire_with_the_retention_and_a_runs_go_with_its_checkpoint(
    org, agent, api, runner, settings
):
    """An Idempotency-Key record replays its response, which can quote a run's input, saved results and
    follow-ups: it is kept no longer than the checkpoint retention, and no longer than the run it is about."""
    settings.CONSOLE_CHECKPOINT_RETENTION_DAYS = 30
    secret = {"path": "notes.md", "content": "the customer's account number"}
    body = {"title": "t", "agent": "builder", "input": {"steps": [{"tool": "file_write", "args": secret}]}}
    assert keyed(api, "/api/tasks/", body, "create-1").status_code == 201
    claimed = keyed(runner, "/api/runner/claim/", {"worker": "w1-a"}, "claim-1").json()
    rid, epoch = claimed["run"], claimed["lease_epoch"]
    assert claimed["input"]["steps"][0]["args"] == secret
    step = {"epoch": epoch, "seq": 1, "tool": "file_write", "args": secret}
    assert keyed(runner, f"/api/runner/runs/{rid}/steps/", step, "plan-1").status_code == 201
    assert keyed(runner, f"/api/runner/runs/{rid}/steps/1/dispatch/", {"epoch": epoch}, "dispatch-1").status_code == 200
    done = {"epoch": epoch, "ok": True, "result": {"bytes": 29}}
    assert keyed(runner, f"/api/runner/runs/{rid}/steps/1/complete/", done, "complete-1").status_code == 200
    finish = {"epoch": epoch, "status": "succeeded"}
    assert keyed(runner, f"/api/runner/runs/{rid}/finish/", finish, "finish-1").status_code == 200
    # A stop asked a day before the retention ends is about the run too (its response lists its steps).
    Run.objects.filter(pk=rid).update(finished_at=timezone.now() - timedelta(days=29))
    assert keyed(api, f"/api/runs/{rid}/stop/", {}, "stop-1").status_code == 200
    records = IdempotencyRecord.objects.order_by("id")
    assert [r.key for r in records] == [
        "create-1",
        "claim-1",
        "plan-1",
        "dispatch-1",
        "complete-1",
        "finish-1",
        "stop-1",
    ]
    assert [r.run_id for r in records] == [None] + [rid] * 6

    # 29 days on: nothing has expired yet.
    IdempotencyRecord.objects.filter(key="create-1").update(created_at=timezone.now() - timedelta(days=29))
    supervise_once(label="sup-a")
    assert IdempotencyRecord.objects.count() == 7

    # 31 days on: the old record expires with the retention, though its task lives on.
    IdempotencyRecord.objects.filter(key="create-1").update(created_at=timezone.now() - timedelta(days=31))
    report = supervise_once(label="sup-a")
    assert report.forgotten == 1 and not IdempotencyRecord.objects.filter(key="create-1").exists()
    # The same key is a new request now: it creates another task instead of replaying the old answer.
    again = keyed(api, "/api/tasks/", body, "create-1")
    assert again.status_code == 201 and "Idempotent-Replayed" not in again.headers

    # The run's checkpoint is purged (it ended over 30 days ago): its records go with it, the stop's included,
    # though that one is a day old, so no replay quotes what was purged.
    Run.objects.filter(pk=rid).update(finished_at=timezone.now() - timedelta(days=31))
    assert supervise_once(label="sup-a").purged == [rid]
    assert not IdempotencyRecord.objects.filter(run_id=rid).exists()
    replayed = keyed(runner, "/api/runner/claim/", {"worker": "w1-a"}, "claim-1")
    assert "Idempotent-Replayed" not in replayed.headers and replayed.json()["run"] != rid  # a new claim
    assert list(IdempotencyRecord.objects.values_list("key", flat=True)) == ["create-1", "claim-1"]
