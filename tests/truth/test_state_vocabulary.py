"""One vocabulary of task states: the board's SQL filter lists exactly the tasks the presenter and the API
name with that state, for one task in every state, on both databases."""

import pytest

from recovery.actions.commands import action_cancel
from recovery.actions.controls import task_close, task_dependencies
from recovery.models import RecoveryAction
from recovery.selectors import task_queryset
from recovery.supervisor.loop import supervise_once
from recovery.triage.filters import STATES
from tasks.models import Run
from tasks.services import run_request_stop, task_pause
from tests.factories import make_agent
from tests.recovery import engine as e

pytestmark = pytest.mark.django_db


def one_task_in_every_state(org, operator) -> dict[str, list[int]]:
    """Crashes first (a lapse ends every live lease), then claims (of the oldest queued run), then the rest."""
    make_agent(org, "careful", auto_resume=False)
    expected: dict[str, list[int]] = {}

    def put(state, task_id):
        expected.setdefault(state, []).append(task_id)

    put("needs_decision", e.parked(org, [e.SAFE, e.WRITE], 2).task_id)
    first = e.interrupted(org, [e.SAFE, e.SAFE, e.SAFE], 2)
    supervise_once()
    e.crash_after_dispatch(Run.objects.get(continues=first), 2)
    supervise_once()
    assert RecoveryAction.objects.get(task_id=first.task_id, status="exhausted")
    put("exhausted", first.task_id)
    idle = e.parked(org, [e.SAFE, e.SAFE], 1, agent="careful")
    action_cancel(action_id=idle.pk, user=operator, version=idle.version)
    put("idle", idle.task_id)

    put("done", e.run_to_end(e.first_run(e.start(org, [e.SAFE], title="done"))).task_id)
    put("running", e.claim(e.first_run(e.start(org, [e.SAFE, e.SAFE], title="running"))).task_id)
    stopping = e.claim(e.first_run(e.start(org, [e.SAFE, e.SAFE], title="stopping")))
    run_request_stop(actor=operator, run=stopping)
    put("stopping", stopping.task_id)
    put("queued", e.start(org, [e.SAFE], title="queued").pk)
    paused = e.start(org, [e.SAFE], title="paused")
    task_pause(actor=operator, task=paused)
    put("blocked", paused.pk)
    waits = e.start(org, [e.SAFE], title="waits on another")
    task_dependencies(user=operator, task_id=waits.pk, add=[expected["queued"][0]])
    put("blocked", waits.pk)
    closed = e.start(org, [e.SAFE], title="closed")
    task_close(user=operator, task_id=closed.pk, resolution="cancelled", reason="not needed")
    put("cancelled", closed.pk)

    return expected


def test_the_board_filter_the_presenter_and_the_api_agree_on_every_state(org, agent, operator, api):
    expected = one_task_in_every_state(org, operator)
    every = sorted(t for ids in expected.values() for t in ids)
    named = {t: api.get(f"/api/tasks/{t}/").json()["state"] for t in every}
    assert {s: sorted(t for t in every if named[t] == s) for s in expected} == {
        s: sorted(ids) for s, ids in expected.items()
    }
    for state in STATES:
        listed = sorted(task_queryset(operator, state=state, q="").values_list("pk", flat=True))
        if state == "all":
            assert listed == every
        elif state == "active":  # the board's Running tab
            assert listed == sorted(expected["running"] + expected["stopping"])
        elif state == "follow_through":  # a view of idle tasks, not a state of its own
            assert set(listed) <= set(expected["idle"])
        else:
            assert listed == sorted(expected.get(state, [])), state
