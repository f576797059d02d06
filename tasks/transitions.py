"""One transition function per stateful model. Every status write goes through here.

Each machine holds its table of allowed `from → to` moves. `move()` is a
compare-and-set `UPDATE … WHERE pk = … AND status IN (the allowed sources)`
that checks the row count, inside the caller's transaction, and appends the
event that records the change when one is given (a caller whose own event
already records the change, such as a claim's `run_claimed`, passes none).

A move outside the table is a programming error (`IllegalTransition`), found
before any SQL runs; a move the table allows but the row no longer permits
(someone changed it first) is `NotEligible` when `strict`, else a 0 return.
Recovery actions are settled by the machine in `recovery.transitions`, built
from the same class.
"""

from dataclasses import dataclass

from django.db import connection, models
from django.db.models import F

from tasks.errors import NotEligible
from tasks.events import event_append
from tasks.models import Message, MessageStatus, Run, RunStatus, Step, StepPhase, Task, TaskStatus


class IllegalTransition(Exception):
    """A move the machine's table does not allow. Never caught: it is a bug in the caller."""


@dataclass(frozen=True)
class Event:
    kind: str
    actor: object
    org_id: int
    task_id: int | None = None
    run_id: int | None = None
    payload: dict | None = None


@dataclass(frozen=True)
class Machine:
    model: type[models.Model]
    table: dict[str, frozenset[str]]
    name: str
    versioned: bool = False  # bump `version` on every move (optimistic concurrency for people)
    field: str = "status"  # the column this machine moves (a step's `phase`, an attempt's `outcome`, …)

    def sources(self, to: str, expect=None) -> tuple[str, ...]:
        allowed = tuple(s for s, targets in self.table.items() if to in targets)
        if not allowed:
            raise IllegalTransition(f"{self.name}: nothing may move to {to!r}")
        if expect is None:
            return allowed
        expect = (expect,) if isinstance(expect, str) else tuple(expect)
        illegal = [s for s in expect if s not in allowed]
        if illegal:
            raise IllegalTransition(f"{self.name}: {', '.join(illegal)} → {to} is not in the table")
        return expect

    def move(
        self,
        pk: int,
        to: str,
        *,
        expect=None,
        where: dict | None = None,
        strict: bool = True,
        event: Event | None = None,
        obj: models.Model | None = None,
        **fields,
    ) -> int:
        """Move one row to `to` if its state (`field`) is an allowed source (or one of `expect`).

        `where` adds conditions to the compare-and-set (e.g. `version`). Returns
        the row count (0 or 1); with `strict` a 0 raises NotEligible. `obj`, the
        caller's instance of the row, takes what was written when the move is made
        (a field written as an expression is left to be read again on access), so
        the caller need not read the row back.
        """
        self._in_transaction()
        qs = self.model.objects.filter(pk=pk, **{f"{self.field}__in": self.sources(to, expect)})
        if where:
            qs = qs.filter(**where)
        if self.versioned:
            fields["version"] = F("version") + 1
        updated = qs.update(**{self.field: to}, **fields)
        if updated != 1:
            if strict:
                current = self.model.objects.filter(pk=pk).values_list(self.field, flat=True).first()
                raise NotEligible(
                    f"{self.name.capitalize()} #{pk} is {current or 'gone'}; it cannot become {to} now.",
                    reason="status_changed",
                    status=current,
                )
            return 0
        if obj is not None:
            setattr(obj, self.field, to)
            for name, value in fields.items():
                if hasattr(value, "resolve_expression"):
                    obj.__dict__.pop(self.model._meta.get_field(name).attname, None)
                else:
                    setattr(obj, name, value)
        if event is not None:
            event_append(
                org_id=event.org_id,
                task_id=event.task_id,
                run_id=event.run_id,
                kind=event.kind,
                actor=event.actor,
                payload=event.payload or {},
            )
        return 1

    def move_all(self, queryset, to: str, *, expect=None, **fields) -> list[int]:
        """Move every row of `queryset` whose status allows it; returns the ids moved.

        The ids are read and updated in the caller's transaction with the status
        condition repeated, so a row changed in between is simply not moved.
        """
        self._in_transaction()
        sources = self.sources(to, expect)
        ids = list(queryset.filter(**{f"{self.field}__in": sources}).values_list("pk", flat=True))
        if not ids:
            return []
        if self.versioned:
            fields["version"] = F("version") + 1
        self.model.objects.filter(pk__in=ids, **{f"{self.field}__in": sources}).update(**{self.field: to}, **fields)
        return ids

    @staticmethod
    def _in_transaction() -> None:
        if not connection.in_atomic_block:
            raise IllegalTransition("a status move must run inside its service's transaction")

    def allowed(self, source: str, to: str) -> bool:
        return to in self.table.get(source, frozenset())


R, T, M, P = RunStatus, TaskStatus, MessageStatus, StepPhase

RUNS = Machine(
    Run,
    {
        # queued → stopped: a person's Stop before any worker started it (the stop is verified).
        # queued → failed: refused at admission, before any worker started it (the workspace
        # no longer matches its manifest: `workspace_validation_failed`).
        R.QUEUED: frozenset({R.RUNNING, R.CANCELLED, R.STOPPED, R.FAILED}),
        R.RUNNING: frozenset({R.SUCCEEDED, R.FAILED, R.STOPPING, R.INTERRUPTED}),
        # stopping → succeeded: every step had completed before the worker saw the stop.
        # stopping → failed: an agent run whose replay diverged: it could not go on, stop or not.
        R.STOPPING: frozenset({R.STOPPED, R.SUCCEEDED, R.FAILED}),
    },
    "run",
)

TASKS = Machine(
    Task,
    {
        T.TODO: frozenset({T.IN_PROGRESS, T.BLOCKED, T.DONE, T.CANCELLED}),
        T.IN_PROGRESS: frozenset({T.BLOCKED, T.DONE, T.CANCELLED}),
        T.BLOCKED: frozenset({T.IN_PROGRESS, T.DONE, T.CANCELLED}),
        # Reopen: eligible again, with nothing revived.
        T.DONE: frozenset({T.TODO}),
        T.CANCELLED: frozenset({T.TODO}),
    },
    "task",
)

MESSAGES = Machine(
    Message,
    {
        # waiting → delivered: the claim of the task's next run takes it (a first run or a fresh start too).
        M.WAITING: frozenset({M.ADMITTED, M.DELIVERED, M.NOT_DELIVERED}),
        # admitted → waiting: its run was cancelled before a worker started it.
        M.ADMITTED: frozenset({M.DELIVERED, M.WAITING, M.NOT_DELIVERED}),
        # delivered → read: the run acknowledged it. delivered → waiting: its run ended without reading it
        # (cut off, stopped, or finished without acknowledging), so the next continuation carries it again.
        M.DELIVERED: frozenset({M.READ, M.WAITING, M.NOT_DELIVERED}),
        # not delivered → waiting: the task was reopened and an operator asked to deliver it.
        M.NOT_DELIVERED: frozenset({M.WAITING}),
    },
    "message",
)

# A step's checkpoint: planned → dispatched (a worker is about to call it) → completed | failed, once each.
# The one-statement PostgreSQL paths (tasks/sql/checkpoints.sql) make the same moves, from this table.
STEPS = Machine(
    Step,
    {
        P.PLANNED: frozenset({P.DISPATCHED}),
        P.DISPATCHED: frozenset({P.COMPLETED, P.FAILED}),
    },
    "step",
    field="phase",
)

OPEN_TASK_STATUSES = (T.TODO, T.IN_PROGRESS, T.BLOCKED)


# --- the claim, in one statement -----------------------------------------------------------

_CLAIM_SQL: str | None = None


def _claim_sql() -> str:
    """The claim on PostgreSQL as one statement, built from the tables above and the models' columns.

    It picks the queued run that waited longest (the partial index `run_queue`), locks it skipping rows
    other claimers hold, moves it queued → running (RUNS' table), follows with its task (TASKS' table),
    appends its `run_claimed` event and records the worker instance's claim poll: what `move()`, the
    task's follow-up, `event_append` and `instance_seen` do, without a round trip each. A candidate whose
    task has a parent (an ancestor's pause is decided in Python), that continues a run (an attempt to
    settle), or whose task has follow-ups waiting (the claim hands them over) is only locked and returned:
    the caller claims it through `move()`.
    """
    global _CLAIM_SQL
    if _CLAIM_SQL is not None:
        return _CLAIM_SQL
    from tasks.models import Agent, Event, Organization, WorkerInstance

    run_sources = RUNS.sources(R.RUNNING, expect=R.QUEUED)
    task_sources = tuple(s for s in TASKS.sources(T.IN_PROGRESS) if s in OPEN_TASK_STATUSES)
    run_t, task_t, dep_t = Run._meta.db_table, Task._meta.db_table, Task.dependencies.through._meta.db_table
    msg_t = Message._meta.db_table

    def cols(model, alias):
        return ", ".join(f'{alias}."{f.column}"' for f in model._meta.concrete_fields)

    def quoted(values):
        return ", ".join(f"'{v}'" for v in values)

    # Only table and column names and the status enums are formatted in; every value is a parameter.
    _CLAIM_SQL = f"""
WITH candidate AS (
    SELECT r.id, r.continues_id, t.parent_id AS task_parent_id,
           EXISTS (SELECT 1 FROM {msg_t} m WHERE m.task_id = r.task_id AND m.status = '{M.WAITING}') AS has_waiting
    FROM {run_t} r JOIN {task_t} t ON t.id = r.task_id
    WHERE r.org_id = %(org)s AND r.status = '{R.QUEUED}'
      AND NOT t.paused
      AND t.status IN ({quoted(OPEN_TASK_STATUSES)})
      AND (t.budget_limit IS NULL OR t.budget_used < t.budget_limit)
      AND NOT EXISTS (
          SELECT 1 FROM {dep_t} d JOIN {task_t} dt ON dt.id = d.to_task_id
          WHERE d.from_task_id = r.task_id AND dt.status <> '{T.DONE}')
      AND r.id <> ALL(%(skipped)s::bigint[])
      AND (%(kinds)s::text[] IS NULL OR r.kind = ANY(%(kinds)s::text[]))
      AND (%(agents)s::text[] IS NULL OR r.agent_id IN (
          SELECT ag.id FROM {Agent._meta.db_table} ag WHERE ag.org_id = %(org)s AND ag.name = ANY(%(agents)s::text[])))
    ORDER BY r.queued_since, r.id
    LIMIT 1
    FOR UPDATE OF r SKIP LOCKED
), claimed AS (
    UPDATE {run_t} r
    SET status = '{R.RUNNING}', lease_worker_id = %(worker)s, lease_owner = %(owner)s,
        lease_epoch = r.lease_epoch + 1, lease_expires_at = %(expires)s, started_at = %(now)s
    FROM candidate c
    WHERE r.id = c.id AND r.status IN ({quoted(run_sources)})
      AND c.task_parent_id IS NULL AND c.continues_id IS NULL AND NOT c.has_waiting
    RETURNING r.*
), moved AS (
    UPDATE {task_t} t
    SET status = CASE WHEN t.status IN ({quoted(task_sources)}) THEN '{T.IN_PROGRESS}' ELSE t.status END,
        updated_at = %(now)s
    FROM claimed
    WHERE t.id = claimed.task_id
    RETURNING t.*
), event AS (
    INSERT INTO {Event._meta.db_table} (org_id, task_id, run_id, kind, actor, payload, created_at)
    SELECT claimed.org_id, claimed.task_id, claimed.id, 'run_claimed', %(actor)s,
           jsonb_build_object('epoch', claimed.lease_epoch, 'owner', claimed.lease_owner,
                              'attempt', claimed.attempt, 'continues', claimed.continues_id,
                              'messages_delivered', '[]'::jsonb),
           %(now)s
    FROM claimed
), seen AS (
    INSERT INTO {WorkerInstance._meta.db_table}
        (org_id, worker_id, instance, first_seen_at, last_seen_at, last_claim_at)
    VALUES (%(org)s, %(worker)s, %(label)s, %(now)s, %(now)s,
            CASE WHEN EXISTS (SELECT 1 FROM claimed) THEN %(now)s::timestamptz END)
    ON CONFLICT (worker_id, instance) DO UPDATE
    SET last_seen_at = EXCLUDED.last_seen_at,
        last_claim_at = COALESCE(EXCLUDED.last_claim_at, {WorkerInstance._meta.db_table}.last_claim_at)
)
SELECT c.id, claimed.id IS NOT NULL, {cols(Run, "claimed")}, {cols(Task, "moved")},
       {cols(Organization, "o")}, {cols(Agent, "a")}
FROM candidate c
LEFT JOIN claimed ON claimed.id = c.id
LEFT JOIN moved ON moved.id = claimed.task_id
LEFT JOIN {Organization._meta.db_table} o ON o.id = moved.org_id
LEFT JOIN {Agent._meta.db_table} a ON a.id = claimed.agent_id
"""  # noqa: S608
    return _CLAIM_SQL


def claim_queued_run(
    *, org_id: int, worker, label: str, owner: str, actor: str, now, expires, skipped=(), agents=None, kinds=None
):
    """Claim in one statement (PostgreSQL, inside the caller's transaction): see `_claim_sql`.

    Returns (run, None) for a run claimed, with its task, organization and agent attached;
    (None, candidate id) for a candidate locked for the caller to claim through `move()`;
    (None, None) when nothing is admissible.
    """
    from tasks.models import Agent, Organization

    Machine._in_transaction()
    params = {
        "org": org_id,
        "worker": worker.pk,
        "owner": owner,
        "label": label,
        "actor": actor,
        "now": now,
        "expires": expires,
        "skipped": list(skipped),
        # None takes any: a worker narrows its claim to some agents and/or some kinds of run.
        "agents": None if agents is None else list(agents),
        "kinds": None if kinds is None else list(kinds),
    }
    from tasks.checkpoints import fetch_one

    row = fetch_one(_claim_sql(), params)
    if row is None:
        return None, None
    candidate, claimed, values = row[0], row[1], row[2:]
    if not claimed:
        return None, candidate
    out = []
    for model in (Run, Task, Organization, Agent):
        fields = model._meta.concrete_fields
        own, values = values[: len(fields)], values[len(fields) :]
        # The ORM's own conversions (JSON columns arrive as text, decoded by their field).
        own = [
            f.from_db_value(v, None, connection) if v is not None and hasattr(f, "from_db_value") else v
            for f, v in zip(fields, own, strict=True)
        ]
        out.append(model.from_db(connection.alias, [f.attname for f in fields], own))
    run, task, org, agent = out
    task.org, run.task, run.agent = org, task, agent
    return run, None
