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

import psycopg
from django.db import connection

from tasks.events import actor_name
from tasks.models import AgentProfile, Event, RecoveryMode, Run, RunKind, RunStatus, Step, StepPhase, Task
from tasks.modes import DEFAULT_MODES, FORGET
from tasks.workspace import FILE_TOOLS

# Tools whose completion updates the workspace manifest from disk: always the general path.
MANIFEST_TOOLS = (*FILE_TOOLS, "bash")

_STEP_COLUMNS = [f.column for f in Step._meta.concrete_fields]
_STEP_ATTNAMES = [f.attname for f in Step._meta.concrete_fields]


def available() -> bool:
    return connection.vendor == "postgresql"


def _integers(*values) -> bool:
    """Only well-typed fences go this way: anything else is for the general path to refuse."""
    return all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**63 for v in values)


def _held(statuses: tuple[str, ...], *, budget_free: bool = False, plan_runs: bool = False) -> str:
    """The fenced lock of the run: held by this worker at this epoch, leased, not lapsed."""
    run_t, task_t = Run._meta.db_table, Task._meta.db_table
    status_list = ", ".join(f"'{s}'" for s in statuses)
    budget = ""
    if budget_free:
        budget = f" AND (SELECT t.budget_limit FROM {task_t} t WHERE t.id = r.task_id) IS NULL"  # noqa: S608
    if plan_runs:
        # An agent run numbers its steps as it goes: its numbering rules are the general path's.
        budget += f" AND r.kind = '{RunKind.PLAN}'"
    return (
        f"SELECT r.id, r.org_id, r.task_id, r.agent_id, r.status FROM {run_t} r "  # noqa: S608
        "WHERE r.id = %(run)s AND r.org_id = %(org)s AND r.lease_worker_id = %(worker)s "
        f"AND r.lease_epoch = %(epoch)s AND r.status IN ({status_list}) AND r.lease_expires_at > %(now)s"
        f"{budget} FOR UPDATE"
    )


def _event(kind_sql: str, payload_sql: str) -> str:
    return (
        f"INSERT INTO {Event._meta.db_table} (org_id, task_id, run_id, kind, actor, payload, created_at) "  # noqa: S608
        f"SELECT r.org_id, r.task_id, r.id, {kind_sql}, %(actor)s, {payload_sql}, %(now)s FROM s, r"
    )


def _returning() -> str:
    return ", ".join(f's."{c}"' for c in _STEP_COLUMNS)


def _step(values) -> Step:
    fields = Step._meta.concrete_fields
    converted = [
        f.from_db_value(v, None, connection) if v is not None and hasattr(f, "from_db_value") else v
        for f, v in zip(fields, values, strict=True)
    ]
    return Step.from_db(connection.alias, _STEP_ATTNAMES, converted)


class _PreparedCursor(psycopg.Cursor):
    """Server-side parameters and a statement prepared once per connection (pooled connections keep it):
    neither the query text nor its plan is built again on every call."""

    def execute(self, query, params=None, *, prepare=None, binary=None):
        return super().execute(query, params, prepare=True if prepare is None else prepare, binary=binary)


def prepared_cursor():
    """A cursor of the default connection that prepares its statements, wrapped as Django's own are
    (errors translated, and logged where queries are: the query-count tests see these statements too)."""
    connection.ensure_connection()
    raw = _PreparedCursor(connection.connection)
    return connection.make_debug_cursor(raw) if connection.queries_logged else connection.make_cursor(raw)


def fetch_one(sql: str, params: dict):
    with prepared_cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


def _fence(*, worker, run_id: int, epoch: int, now) -> dict:
    return {"run": run_id, "org": worker.org_id, "worker": worker.pk, "epoch": epoch, "now": now,
            "actor": actor_name(worker)}  # fmt: skip


_LEASED = (RunStatus.RUNNING, RunStatus.STOPPING)

_MODES = ", ".join(f"'{m}'" for m in RecoveryMode.values)

_PLANNED_PAYLOAD = "jsonb_build_object('seq', s.seq, 'tool', s.tool, 'recovery_mode', s.recovery_mode)"

PLAN_SQL = f"""
WITH r AS ({_held(_LEASED, plan_runs=True)}),
s AS (
    INSERT INTO {Step._meta.db_table}
        (run_id, seq, parent_id, parent_seq, tool, args, recovery_mode, phase, result, error, usage,
         usage_detail, reused_from_id, dispatch_epoch, planned_at, dispatched_at, completed_at)
    SELECT r.id, %(seq)s, NULL, NULL, %(tool)s::text, %(args)s::jsonb,
           -- tasks.modes.mode_for: the admin's override, else the registered catalogue's mode, else the default
           COALESCE((SELECT CASE
                         WHEN p.tool_modes ->> %(tool)s::text IN ({_MODES}) THEN p.tool_modes ->> %(tool)s::text
                         WHEN p.tool_catalogue -> %(tool)s::text ->> 'mode' IN ({_MODES})
                             THEN p.tool_catalogue -> %(tool)s::text ->> 'mode'
                     END
                     FROM {AgentProfile._meta.db_table} p WHERE p.agent_id = r.agent_id),
                    %(default_mode)s),
           '{StepPhase.PLANNED}', NULL, '', 0, NULL, NULL, NULL, %(now)s, NULL, NULL
    FROM r
    ON CONFLICT (run_id, seq) DO NOTHING
    RETURNING *
), e AS ({_event("'step_planned'", _PLANNED_PAYLOAD)})
SELECT {_returning()} FROM s
"""  # noqa: S608

DISPATCH_SQL = f"""
WITH r AS ({_held((RunStatus.RUNNING,))}),
s AS (
    UPDATE {Step._meta.db_table} s
    SET phase = '{StepPhase.DISPATCHED}', dispatched_at = %(now)s, dispatch_epoch = %(epoch)s
    FROM r
    WHERE s.run_id = r.id AND s.seq = %(seq)s AND s.phase = '{StepPhase.PLANNED}'
    RETURNING s.*
), e AS ({_event("'step_dispatched'", "jsonb_build_object('seq', s.seq, 'tool', s.tool)")})
SELECT {_returning()} FROM s
"""  # noqa: S608

COMPLETE_SQL = f"""
WITH r AS ({_held(_LEASED, budget_free=True)}),
s AS (
    UPDATE {Step._meta.db_table} s
    SET phase = %(phase)s, result = %(result)s::jsonb, error = %(error)s, usage = %(usage)s::integer,
        usage_detail = %(usage_detail)s::jsonb, completed_at = %(now)s
    FROM r
    WHERE s.run_id = r.id AND s.seq = %(seq)s AND s.phase = '{StepPhase.DISPATCHED}'
      AND s.tool <> ALL(%(manifest_tools)s::text[])
    RETURNING s.*
), t AS (
    UPDATE {Task._meta.db_table} t SET budget_used = t.budget_used + %(usage)s::integer, updated_at = %(now)s
    FROM s, r
    WHERE t.id = r.task_id AND %(usage)s::integer > 0
), e AS ({_event("%(kind)s", "jsonb_build_object('seq', s.seq, 'tool', s.tool, 'usage', %(usage)s::integer)")})
SELECT {_returning()}, r.status FROM s, r
"""  # noqa: S608


def plan(*, worker, run_id: int, epoch: int, seq: int, tool: str, args: dict, now) -> Step | None:
    """A top-level step of a tool other than `subagent`, planned for the first time."""
    if not _integers(run_id, epoch, seq):
        return None
    row = fetch_one(
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
    row = fetch_one(DISPATCH_SQL, {**_fence(worker=worker, run_id=run_id, epoch=epoch, now=now), "seq": seq})
    return _step(row) if row else None


def complete(
    *, worker, run_id: int, epoch: int, seq: int, ok: bool, result, error: str, usage: int, now, usage_detail=None
) -> tuple[Step, bool] | None:
    """The outcome of a step that changes no workspace file, of a run whose task has no budget limit.

    Returns the step and whether the run was asked to stop.
    """
    if not _integers(run_id, epoch, seq, usage) or usage >= 2**31:
        return None
    row = fetch_one(
        COMPLETE_SQL,
        {
            **_fence(worker=worker, run_id=run_id, epoch=epoch, now=now),
            "seq": seq,
            "phase": StepPhase.COMPLETED if ok else StepPhase.FAILED,
            "result": None if result is None else json.dumps(result),
            "error": error,
            "usage": usage,
            "usage_detail": None if usage_detail is None else json.dumps(usage_detail),
            "kind": "step_completed" if ok else "step_failed",
            "manifest_tools": list(MANIFEST_TOOLS),
        },
    )
    if row is None:
        return None
    return _step(row[:-1]), row[-1] == RunStatus.STOPPING
