"""Checkpoint size bound: an oversized result disables recovery for its run; execution goes on."""

import pytest

from recovery.actions import action_retry
from recovery.models import RecoveryAction
from tasks import services
from tasks.errors import NotEligible
from tests.recovery import engine

pytestmark = pytest.mark.django_db


def test_an_oversized_result_disables_recovery_for_the_run_and_says_why(org, agent, operator, api):
    task = engine.start(org, [engine.SAFE, engine.SAFE, engine.SAFE])
    run = engine.claim(engine.first_run(task))
    engine.plan_step(run, 1)
    engine.dispatch_step(run, 1)
    # The worker could not send the result whole (413): it completes the step without it.
    step, stop = services.step_complete(
        worker=run.lease_worker,
        run_id=run.pk,
        epoch=run.lease_epoch,
        seq=1,
        ok=True,
        result=None,
        result_too_large=True,
    )
    assert step.phase == "completed" and step.result is None and stop is False
    run.refresh_from_db()
    assert "exceeded 8 MiB" in run.recovery_disabled
    # Execution goes on: the next step is accepted.
    engine.plan_step(run, 2)
    engine.dispatch_step(run, 2)

    engine.lapse()
    from recovery.supervisor.loop import supervise_once

    supervise_once()
    action = RecoveryAction.objects.get(task=task)
    assert action.cause == "checkpoint_too_large" and action.status == "open"
    body = api.get(f"/api/runs/{run.pk}/").json()
    assert body["diagnosis"]["disposition"] == "needs_decision"
    assert body["diagnosis"]["reasons"][0]["code"] == "checkpoint_too_large"
    with pytest.raises(NotEligible):
        action_retry(action_id=action.pk, user=operator, version=action.version)
    assert not task.runs.filter(continues=run).exists()
