"""Pages do not grow in SQL queries with data: the same bound holds for 10 and for 1,000 of everything.

A few objects are made through the services (so every kind of card is drawn);
the volume is bulk-created, valid against every constraint of the models.
"""

from datetime import timedelta

import pytest
from django.utils import timezone

from recovery.actions.commands import action_decide, actions_settle
from recovery.models import RecoveryAction, RecoveryAttempt
from tasks.models import Run, Step, Task
from tests.console.board_scenarios import bulk_board, write_plan
from tests.console.scenarios import running_task, unknown_outcome_action

pytestmark = pytest.mark.django_db

# Measured on the smallest data set, plus a margin of 2: board 15, task page 31, run page 12
# (session, user and memberships are 3 of them; the header's operations warnings 1; the navigation's
# inbox count 1; the workspace panel reads its manifest, hold, held copies and last export in 4, and a
# live card's gate asks for a workspace hold in 1; the board's filter menus read agents and what waits
# in 2, and the person's saved views in 1).
BOARD_QUERIES = 17
TASK_PAGE_QUERIES = 33
RUN_PAGE_QUERIES = 14


def bulk_chain(task: Task, *, runs: int, steps: int) -> list[Run]:
    """A chain of `runs` interrupted runs of `task`, `steps` steps in all.

    Each run completed its steps but the last, which was dispatched and cut off.
    Every run but the last was settled by a person's decision (a resolved
    unknown-outcome action with one attempt continued by the next run); the last
    run has the open action.
    """
    now = timezone.now()
    per_run = max(1, steps // runs)
    plan = write_plan(per_run)
    chain: list[Run] = []
    prev = None
    for i in range(runs):
        run = Run.objects.create(
            org_id=task.org_id,
            task=task,
            agent_id=task.agent_id,
            continues=prev,
            attempt=i + 1,
            status="interrupted",
            input=plan,
            error_code="lease_lapsed",
            error_detail="Worker w1/a stopped renewing its lease.",
            lease_owner="w1/a",
            lease_epoch=1,
            lease_expires_at=now,
            started_at=now,
            finished_at=now,
        )
        chain.append(run)
        prev = run
    Step.objects.bulk_create(
        [
            Step(
                run=run,
                seq=seq,
                tool="file_write",
                args={"path": f"f{seq}.txt", "content": "x"},
                recovery_mode="notify",
                phase="completed" if seq < per_run else "dispatched",
                result={"written": seq} if seq < per_run else None,
                usage=1 if seq < per_run else 0,
                dispatch_epoch=1,
                planned_at=now,
                dispatched_at=now,
                completed_at=now if seq < per_run else None,
            )
            for run in chain
            for seq in range(1, per_run + 1)
        ],
        batch_size=500,
    )
    evidence = {
        "disposition": "needs_decision",
        "reasons": [{"code": "unknown_outcome", "seq": per_run, "detail": "cut off after dispatch"}],
        "seq": per_run,
        "tool": "file_write",
        "args": plan["steps"][-1]["args"],
        "dispatched_at": now.isoformat(),
        "recovery_mode": "notify",
    }
    actions = RecoveryAction.objects.bulk_create(
        [
            RecoveryAction(
                org_id=task.org_id,
                task=task,
                run=run,
                kind="unknown_outcome",
                status="open" if run is chain[-1] else "resolved",
                resolution="" if run is chain[-1] else "continued",
                cause="unknown_outcome",
                evidence=evidence,
                seq=per_run,
                original_owner_id=task.agent_id,
                recovery_owner="role:operator" if run is chain[-1] else "",
                attempts=0 if run is chain[-1] else 1,
                due_at=now + timedelta(days=1),
                version=1 if run is chain[-1] else 3,
                closed_at=None if run is chain[-1] else now,
            )
            for run in chain
        ]
    )
    RecoveryAttempt.objects.bulk_create(
        [
            RecoveryAttempt(
                action=action,
                number=1,
                requested_by="olive",
                requested_at=now,
                acknowledged_at=now,
                continuation_run=chain[i + 1],
                outcome="continued",
                accepted_duplicate_risk=True,
                decision="not_performed",
                note="not on disk",
            )
            for i, action in enumerate(actions[:-1])
        ]
    )
    Task.objects.filter(pk=task.pk).update(status="blocked", budget_used=(per_run - 1) * runs)
    return chain


def by_services(org, operator) -> None:
    """The newest tasks, made by the services: exhausted, needs decision, retrying, running."""
    exhausted = unknown_outcome_action(org, title="s-exhausted")
    actions_settle(now=timezone.now() + timedelta(days=3))
    assert RecoveryAction.objects.get(pk=exhausted.pk).status == "exhausted"
    unknown_outcome_action(org, title="s-decision")
    retrying = unknown_outcome_action(org, title="s-retrying")
    running_task(org, title="s-running")  # after the scenarios, which lapse every lease; before the continuation
    action_decide(action_id=retrying.pk, user=operator, version=1, outcome="not_performed", accept_duplicate_risk=True)


@pytest.mark.parametrize("size", [10, 1000])
def test_the_board_does_not_grow_with_tasks(size, org, agent, operator, login, django_assert_max_num_queries):
    bulk_board(org, agent, size)
    by_services(org, operator)
    client = login(operator)
    client.get("/")  # warm the session and the template cache
    urls = (
        "/",
        "/?state=needs_decision",
        "/?state=blocked",
        "/?state=all&q=bulk",
        "/?state=follow_through",
        "/?q=%237",  # a task's or a run's id
        "/?q=f1.txt",  # a tool argument, an error text
        "/?sort=urgency",
        "/?sort=urgency&agent=builder&owner=role:operator&tool=file_write&age=1h",
    )
    for url in urls:
        with django_assert_max_num_queries(BOARD_QUERIES):
            response = client.get(url)
        assert response.status_code == 200
    assert client.get("/?sort=urgency").text.count('class="task-row') == min(size + 4, 50)  # and by_services' 4


SHAPES = {
    "1 run, 10 steps": (1, 10),
    "10 runs, 100 steps": (10, 100),
    "1 run, 1000 steps": (1, 1000),
    "10 runs, 1000 steps": (10, 1000),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_the_task_page_does_not_grow_with_runs_steps_or_actions(
    shape, org, agent, operator, login, django_assert_max_num_queries
):
    runs, steps = SHAPES[shape]
    task = Task.objects.create(org=org, agent=agent, title="long story")
    chain = bulk_chain(task, runs=runs, steps=steps)
    client = login(operator)
    client.get("/")
    with django_assert_max_num_queries(TASK_PAGE_QUERIES):
        response = client.get(f"/tasks/{task.pk}/")
    assert response.status_code == 200
    assert response.text.count('<article id="run-') == runs
    assert response.text.count('<article id="action-') == runs
    assert response.text.count('class="step ') == steps
    assert RecoveryAction.objects.get(run=chain[-1]).status == "open"  # reading did not retire it


@pytest.mark.parametrize("shape", SHAPES)
def test_the_run_page_does_not_grow_with_runs_or_steps(
    shape, org, agent, operator, login, django_assert_max_num_queries
):
    runs, steps = SHAPES[shape]
    task = Task.objects.create(org=org, agent=agent, title="long story")
    chain = bulk_chain(task, runs=runs, steps=steps)
    client = login(operator)
    client.get("/")
    with django_assert_max_num_queries(RUN_PAGE_QUERIES):
        response = client.get(f"/agents/builder/runs/{chain[-1].pk}/")
    assert response.status_code == 200
    assert response.text.count('class="step ') == steps // runs
