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
from functools import cache

from django.db import connection, models
from django.db.models import F

from tasks import sql
from tasks.errors import NotEligible
from tasks.event_kinds import registered
from tasks.events import event_append
from tasks.models import (
    Agent,
    Message,
    MessageStatus,
    Organization,
    Run,
    RunStatus,
    Step,
    StepPhase,
    Task,
    TaskStatus,
    WorkerInstance,
)
from tasks.models import Event as EventRow
from tasks.worker_instances import poll_due, poll_recorded


class IllegalTransition(Exception):
    """A move the machine's table does not allow. Never caught: it is a bug in the caller."""


@dataclass(frozen=True)
class NewEvent:
    """The Event a move appends (tasks.models.Event is the row it becomes)."""

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
        event: NewEvent | None = None,
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


@cache
def claim_sql() -> str:
    """The claim on PostgreSQL as one statement (tasks/sql/claim.sql), filled from the tables above and the models.

    It picks the queued run that waited longest (the partial index `run_queue`), locks it skipping rows
    other claimers hold, moves it queued → running (RUNS' table), follows with its task (TASKS' table),
    appends its `run_claimed` event and records the worker instance's claim poll when due: what `move()`, the
    task's follow-up, `event_append` and `instance_seen` do, without a round trip each. A candidate whose
    task has a parent (an ancestor's pause is decided in Python), that continues a run (an attempt to
    settle), or whose task has follow-ups waiting (the claim hands them over) is only locked and returned:
    the caller claims it through `move()`.
    """
    return sql.named(
        "claim",
        "claim_run",
        run_t=Run._meta.db_table,
        task_t=Task._meta.db_table,
        dep_t=Task.dependencies.through._meta.db_table,
        msg_t=Message._meta.db_table,
        agent_t=Agent._meta.db_table,
        event_t=EventRow._meta.db_table,
        instance_t=WorkerInstance._meta.db_table,
        org_t=Organization._meta.db_table,
        waiting=M.WAITING,
        queued=R.QUEUED,
        running=R.RUNNING,
        run_from=sql.quoted(RUNS.sources(R.RUNNING, expect=R.QUEUED)),
        open_tasks=sql.quoted(OPEN_TASK_STATUSES),
        done=T.DONE,
        task_from=sql.quoted(s for s in TASKS.sources(T.IN_PROGRESS) if s in OPEN_TASK_STATUSES),
        in_progress=T.IN_PROGRESS,
        run_columns=sql.columns(Run, "claimed"),
        task_columns=sql.columns(Task, "moved"),
        org_columns=sql.columns(Organization, "o"),
        agent_columns=sql.columns(Agent, "a"),
        claimed_kind=registered("run_claimed"),
    )


def claim_queued_run(
    *,
    org_id: int,
    worker,
    label: str,
    owner: str,
    actor: str,
    now,
    expires,
    skipped=(),
    agents=None,
    kinds=None,
    held: str = "",
    alone: bool = False,
):
    """Claim in one statement (PostgreSQL, inside the caller's transaction): see `claim_sql`.

    Returns (run, None) for a run claimed, with its task, organization and agent attached;
    (None, candidate id) for a candidate locked for the caller to claim through `move()`;
    (None, None) when nothing is admissible.

    With `alone` the statement runs outside any transaction, as a transaction of its own (autocommit): a run it
    claims is committed when it returns, and a candidate's lock has ended (the caller claims it in a transaction,
    by running the statement again there).
    """
    if alone:
        if connection.in_atomic_block:
            raise IllegalTransition("a claim alone runs outside any transaction")
    else:
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
        # The label of the workspaces the worker holds ("": none): a task a worker holds is claimed only by one
        # serving the same label (tasks.worker_workspaces).
        "held": held,
    }
    params["seen"], params["seen_claim"] = poll_due(worker=worker, label=label)
    row = sql.fetch_one(claim_sql(), params)
    claimed = row is not None and row[1]
    if params["seen"] or (params["seen_claim"] and claimed):
        poll_recorded(worker=worker, label=label, seen=True, claimed=params["seen_claim"] and claimed)
    if row is None:
        return None, None
    candidate, values = row[0], row[2:]
    if not claimed:
        return None, candidate
    out = []
    for model in (Run, Task, Organization, Agent):
        width = len(model._meta.concrete_fields)
        out.append(sql.from_row(model, values[:width]))
        values = values[width:]
    run, task, org, agent = out
    task.org, run.task, run.agent = org, task, agent
    return run, None
