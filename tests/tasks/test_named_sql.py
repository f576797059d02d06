"""The one-statement PostgreSQL paths are named SQL (tasks/sql/*.sql) whose moves are their machines' moves.

The statements are rendered as the server runs them and read back: every state a statement writes, from every
state it accepts, is a move the machine's table allows, and no state is typed into a .sql file by hand.
"""

import re
from pathlib import Path

import pytest

from tasks import checkpoints, sql
from tasks.models import MessageStatus, RunStatus, StepPhase, TaskStatus
from tasks.transitions import RUNS, STEPS, TASKS, claim_sql

SQL_DIR = Path(sql.__file__).parent


def _states(text: str) -> list[str]:
    return re.findall(r"'(\w+)'", text)


def _moves(statement: str, column: str) -> list[tuple[list[str], str]]:
    """(sources, target) of each `UPDATE … SET <column> = '<to>' … <column> IN (<sources>)` in `statement`."""
    found = []
    for update in re.split(r"\bUPDATE\b", statement)[1:]:
        update = update.split("RETURNING")[0]
        to = re.search(rf"SET {column} = '(\w+)'", update)
        sources = re.search(rf"\.{column} IN \(([^)]*)\)", update)
        if to and sources:
            found.append((_states(sources.group(1)), to.group(1)))
    return found


def test_dispatch_moves_a_step_only_as_the_step_machine_allows():
    moves = _moves(checkpoints.DISPATCH_SQL, "phase")
    assert moves == [([StepPhase.PLANNED], StepPhase.DISPATCHED)]
    assert all(STEPS.allowed(source, to) for sources, to in moves for source in sources)


def test_complete_moves_from_where_completed_and_failed_are_both_allowed():
    sources = _states(re.search(r"s\.phase IN \(([^)]*)\)", checkpoints.COMPLETE_SQL).group(1))
    assert sources == [StepPhase.DISPATCHED]
    for to in (StepPhase.COMPLETED, StepPhase.FAILED):
        assert all(STEPS.allowed(source, to) for source in sources)


def test_plan_inserts_a_step_in_the_phase_nothing_moves_to():
    assert f"'{StepPhase.PLANNED}'" in checkpoints.PLAN_SQL
    assert not any(StepPhase.PLANNED in targets for targets in STEPS.table.values())


def test_the_claim_moves_the_run_and_its_task_as_their_machines_allow():
    statement = claim_sql()
    runs = _moves(statement, "status")
    assert runs == [([RunStatus.QUEUED], RunStatus.RUNNING)]
    assert RUNS.allowed(RunStatus.QUEUED, RunStatus.RUNNING)
    task_sources = _states(re.search(r"WHEN t\.status IN \(([^)]*)\) THEN '(\w+)'", statement).group(1))
    assert task_sources and all(TASKS.allowed(source, TaskStatus.IN_PROGRESS) for source in task_sources)


def test_the_claim_writes_the_instance_poll_only_when_due_and_moves_nothing_there():
    # The poll is bookkeeping, written at most once a second (tasks.worker_instances `poll_due`): the upsert
    # inserts a row only when the caller says the poll, or the claim this statement makes, is due.
    seen = claim_sql().split("seen AS (")[1].split("\n)\n")[0]
    assert "WHERE %(seen)s OR (%(seen_claim)s AND EXISTS (SELECT 1 FROM claimed))" in seen
    assert _moves(seen, "status") == [] and not _states(seen)


@pytest.mark.parametrize("path", sorted(SQL_DIR.glob("*.sql")), ids=lambda p: p.name)
def test_no_state_is_typed_into_a_sql_file(path):
    states = {*RunStatus.values, *TaskStatus.values, *StepPhase.values, *MessageStatus.values} - {""}
    typed = {value for value in _states(path.read_text()) if value in states}
    assert typed == set(), f"{path.name} names states by hand: {typed}"


def test_a_named_statement_with_a_placeholder_left_unfilled_is_an_error():
    with pytest.raises(KeyError):
        sql.named("checkpoints", "dispatch_step")
