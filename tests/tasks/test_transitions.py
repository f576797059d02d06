"""One transition function per stateful model: the tables, and nothing else writes a status.

Every (from → to) pair of each model is tried on a real row: a pair in the
table moves it (with its event when one is given), any other is refused before
any SQL runs and leaves the row as it was.
"""

import runpy

import pytest
from django.db import transaction

from recovery.models import ActionStatus, BulkOperation, BulkStatus, RecoveryAction, Repair
from recovery.transitions import ACTIONS, BULK, REPAIRS
from tasks.errors import NotEligible
from tasks.models import Event, Message, MessageStatus, Run, RunStatus, Task, TaskStatus
from tasks.transitions import MESSAGES, RUNS, TASKS, IllegalTransition
from tasks.transitions import NewEvent as TransitionEvent
from tests.processes import ROOT
from tests.recovery import engine as e

MACHINES = {
    "run": (RUNS, RunStatus.values),
    "task": (TASKS, TaskStatus.values),
    "message": (MESSAGES, MessageStatus.values),
    "action": (ACTIONS, ActionStatus.values),
    "bulk": (BULK, BulkStatus.values),
    "repair": (REPAIRS, ("queued", "claimed", "done", "held", "failed")),
}


def _row(name: str, org, status: str):
    """A row of the model in `status`, written directly as a fixture (the one place a test may)."""
    if name == "bulk":
        from django.utils import timezone

        return BulkOperation.objects.create(
            org=org, actor_name="test", action="pause", scope_hash="0" * 64, expires_at=timezone.now()
        )
    task = e.start(org, [e.SAFE], title=f"{name}-{status}")
    if name == "task":
        Task.objects.filter(pk=task.pk).update(status=status)
        return Task.objects.get(pk=task.pk)
    run = e.first_run(task)
    if name == "run":
        return run
    if name == "message":
        Message.objects.create(org=org, task=task, body="hi", status=MessageStatus.WAITING)
        return Message.objects.get(task=task)
    action = RecoveryAction.objects.create(
        org=org, task=task, run=run, kind="continuation", cause="test", evidence={}, original_owner_id=task.agent_id
    )
    if name == "repair":
        return Repair.objects.create(action=action, repair="reconcile")
    return action


def pairs():
    for name, (machine, values) in MACHINES.items():
        for source in values:
            for target in values:
                if source != target:
                    yield pytest.param(name, source, target, id=f"{name}:{source}->{target}")


@pytest.mark.parametrize("name,source,target", pairs())
def test_every_move_outside_the_table_is_refused_and_every_move_inside_it_is_made(name, source, target, org, agent):
    machine, _ = MACHINES[name]
    row = _row(name, org, source)
    model = type(row)
    # Put the row in `source` as a fixture would (runs and messages have constraints on what goes with a status).
    if name == "run":
        fields = {"status": source}
        if source in ("running", "stopping"):
            fields.update(lease_owner="w/x", lease_epoch=1, lease_expires_at=row.created_at)
        model.objects.filter(pk=row.pk).update(**fields)
    elif name == "message" and source != "waiting":
        run = Run.objects.filter(task_id=row.task_id).first()
        read_at = row.created_at if source == "read" else None  # a read message has its acknowledgement's time
        model.objects.filter(pk=row.pk).update(status=source, run=run, read_at=read_at)
    else:
        model.objects.filter(pk=row.pk).update(status=source)
    events = Event.objects.count()
    allowed = machine.allowed(source, target)
    extra = {}
    if name == "run" and target in ("running", "stopping"):
        extra = {"lease_owner": "w/x", "lease_epoch": 1, "lease_expires_at": row.created_at}
    if name == "message" and target in ("admitted", "delivered", "read"):
        extra = {"run": Run.objects.filter(task_id=row.task_id).first()}
        if target == "read":
            extra["read_at"] = row.created_at
    if name == "message" and target in ("waiting", "not_delivered") and source == "delivered":
        extra = {"run": None}
    with transaction.atomic():
        if allowed:
            moved = machine.move(
                row.pk, target, expect=source, event=TransitionEvent("run_queued", "test", org.pk, None, None), **extra
            )
            assert moved == 1
        else:
            with pytest.raises(IllegalTransition):
                machine.move(row.pk, target, expect=source)
    current = model.objects.get(pk=row.pk).status
    assert current == (target if allowed else source)
    assert Event.objects.count() == events + (1 if allowed else 0)


def test_a_move_whose_row_changed_meanwhile_is_refused_and_changes_nothing(org, agent):
    task = e.start(org, [e.SAFE])
    run = e.first_run(task)
    with transaction.atomic():
        # queued → running is in the table, but the row is no longer queued.
        Run.objects.filter(pk=run.pk).update(status="cancelled")
        with pytest.raises(NotEligible):
            RUNS.move(run.pk, RunStatus.RUNNING, lease_owner="w", lease_epoch=1, lease_expires_at=run.created_at)
        assert RUNS.move(run.pk, RunStatus.CANCELLED, strict=False) == 0
    assert Run.objects.get(pk=run.pk).status == "cancelled"


@pytest.mark.django_db(transaction=True)
def test_a_move_outside_a_transaction_is_refused(org, agent):
    task = e.start(org, [e.SAFE])
    with pytest.raises(IllegalTransition):
        RUNS.move(e.first_run(task).pk, RunStatus.CANCELLED)


def test_an_action_move_bumps_its_version(org, agent):
    action = _row("action", org, "open")
    with transaction.atomic():
        ACTIONS.move(action.pk, ActionStatus.CANCELLED)
    assert RecoveryAction.objects.get(pk=action.pk).version == action.version + 1


# --- nothing else writes a state (make lint's house rules, bin/lint_house.py) --------------------

lint_house = runpy.run_path(str(ROOT / "bin" / "lint_house.py"))


def test_only_the_machines_move_a_state_and_only_services_create_rows_with_one():
    assert lint_house["offences"]() == {}


def test_the_house_rules_catch_a_state_written_outside_its_machine():
    bad = (
        "def v(run, step, attempt):\n"
        "    Run.objects.filter(pk=1).update(status='running')\n"
        "    run.status = 'x'\n"
        "    Step.objects.filter(pk=1).update(phase='completed')\n"
        "    attempt.outcome = 'succeeded'\n"
        "    BulkItem.objects.filter(pk=1).update(result='applied')\n"
        "    Step.objects.filter(pk=1).update(result={})\n"  # a step's saved result is no state
    )
    assert len(lint_house["state_writes"](bad)) == 5


def test_the_house_rules_catch_markup_built_in_a_python_string():
    bad = 'def card(x):\n    """Renders <div> cards."""\n    return f\'<div class="card">{x}</div>\'\n'
    assert lint_house["html_strings"](bad) == ["markup in a string at line 3"]
