"""The common checkpoint writes on PostgreSQL, one statement each (and so one round trip and one commit).

`step_plan`, `step_dispatch` and `step_complete` (tasks/services.py) try these first. Each statement
locks the run only if the worker holds its lease at that epoch (the same fence as `_check_held`, and
`FOR UPDATE`, so a supervisor expiring the lease waits for it or is waited for), writes the step with
a compare-and-set on its phase, and appends the step's event — a checkpoint and its event commit
together. When a statement writes nothing (a stale lease, a repeated call, a step in another phase, or
a case it leaves out: nested steps, subagents, file-changing tools, budgets, oversized results), the
service runs its general path, which decides and says why. So these are only a faster road to the
same outcome for the cases they accept; every refusal still comes from the services.
"""

import json

from django.db import connection

from tasks import sql
from tasks.event_kinds import registered
from tasks.events import actor_name
from tasks.models import AgentProfile, Event, RecoveryMode, Run, RunKind, RunStatus, Step, StepPhase, Task
from tasks.modes import DEFAULT_MODES, FORGET
from tasks.transitions import STEPS
from tasks.workspace import FILE_TOOLS

# Tools whose completion updates the workspace manifest from disk: always the general path.
MANIFEST_TOOLS = (*FILE_TOOLS, "bash")


def available() -> bool:
    return connection.vendor == "postgresql"


def _integers(*values) -> bool:
    """Only well-typed fences go this way: anything else is for the general path to refuse."""
    return all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**63 for v in values)


def _held(statuses: tuple[str, ...], *, budget_free: bool = False, plan_runs: bool = False) -> str:
    """The fenced lock of the run: held by this worker at this epoch, leased, not lapsed."""
    extra = ""
    if budget_free:
        extra = f" AND (SELECT t.budget_limit FROM {Task._meta.db_table} t WHERE t.id = r.task_id) IS NULL"  # noqa: S608
    if plan_runs:
        # An agent run numbers its steps as it goes: its numbering rules are the general path's.
        extra += f" AND r.kind = '{RunKind.PLAN}'"
    return sql.named("checkpoints", "held_run", run_t=Run._meta.db_table, statuses=sql.quoted(statuses), extra=extra)


def _event(kind: str, payload_sql: str) -> str:
    """The step's event: a registered kind, or `%(kind)s` (the statement's parameter, step_completed or step_failed)."""
    kind_sql = kind if kind == "%(kind)s" else f"'{registered(kind)}'"
    return sql.named("checkpoints", "step_event", event_t=Event._meta.db_table, kind=kind_sql, payload=payload_sql)


def _step(values) -> Step:
    return sql.from_row(Step, values)


def _fence(*, worker, run_id: int, epoch: int, now) -> dict:
    return {"run": run_id, "org": worker.org_id, "worker": worker.pk, "epoch": epoch, "now": now,
            "actor": actor_name(worker)}  # fmt: skip


_LEASED = (RunStatus.RUNNING, RunStatus.STOPPING)

_PLANNED_PAYLOAD = "jsonb_build_object('seq', s.seq, 'tool', s.tool, 'recovery_mode', s.recovery_mode)"

# Tables, columns and state literals from the models and STEPS' table: the moves are the machine's.
_NAMES = {
    "step_t": Step._meta.db_table,
    "task_t": Task._meta.db_table,
    "profile_t": AgentProfile._meta.db_table,
    "step_columns": sql.columns(Step, "s"),
    "modes": sql.quoted(RecoveryMode.values),
    "planned": StepPhase.PLANNED,
    "dispatched": StepPhase.DISPATCHED,
    "dispatch_from": sql.quoted(STEPS.sources(StepPhase.DISPATCHED)),
    # A completion moves to completed or failed (its parameter): from where both are allowed.
    "complete_from": sql.quoted(sorted(set(STEPS.sources(StepPhase.COMPLETED)) & set(STEPS.sources(StepPhase.FAILED)))),
}

PLAN_SQL = sql.named(
    "checkpoints", "plan_step", held=_held(_LEASED, plan_runs=True), event=_event("step_planned", _PLANNED_PAYLOAD),
    **_NAMES,
)  # fmt: skip

DISPATCH_SQL = sql.named(
    "checkpoints",
    "dispatch_step",
    held=_held((RunStatus.RUNNING,)),
    event=_event("step_dispatched", "jsonb_build_object('seq', s.seq, 'tool', s.tool)"),
    **_NAMES,
)

COMPLETE_SQL = sql.named(
    "checkpoints",
    "complete_step",
    held=_held(_LEASED, budget_free=True),
    event=_event("%(kind)s", "jsonb_build_object('seq', s.seq, 'tool', s.tool, 'usage', %(usage)s::integer)"),
    **_NAMES,
)


def plan(*, worker, run_id: int, epoch: int, seq: int, tool: str, args: dict, now) -> Step | None:
    """A top-level step of a tool other than `subagent`, planned for the first time."""
    if not _integers(run_id, epoch, seq):
        return None
    row = sql.fetch_one(
        PLAN_SQL,
        {
            **_fence(worker=worker, run_id=run_id, epoch=epoch, now=now),
            "seq": seq,
            "tool": tool,
            "args": json.dumps(args),
            "default_mode": DEFAULT_MODES.get(tool, FORGET),
        },
    )
    return _step(row) if row else None


def dispatch(*, worker, run_id: int, epoch: int, seq: int, now) -> Step | None:
    if not _integers(run_id, epoch, seq):
        return None
    row = sql.fetch_one(DISPATCH_SQL, {**_fence(worker=worker, run_id=run_id, epoch=epoch, now=now), "seq": seq})
    return _step(row) if row else None


def complete(
    *, worker, run_id: int, epoch: int, seq: int, ok: bool, result, error: str, usage: int, now, usage_detail=None
) -> tuple[Step, bool] | None:
    """The outcome of a step that changes no workspace file, of a run whose task has no budget limit.

    Returns the step and whether the run was asked to stop.
    """
    if not _integers(run_id, epoch, seq, usage) or usage >= 2**31:
        return None
    row = sql.fetch_one(
        COMPLETE_SQL,
        {
            **_fence(worker=worker, run_id=run_id, epoch=epoch, now=now),
            "seq": seq,
            "phase": StepPhase.COMPLETED if ok else StepPhase.FAILED,
            "result": None if result is None else json.dumps(result),
            "error": error,
            "usage": usage,
            "usage_detail": None if usage_detail is None else json.dumps(usage_detail),
            "kind": registered("step_completed" if ok else "step_failed"),
            "manifest_tools": list(MANIFEST_TOOLS),
        },
    )
    if row is None:
        return None
    return _step(row[:-1]), row[-1] == RunStatus.STOPPING
