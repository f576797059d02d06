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
from tasks.models import Message, MessageStatus, Run, RunStatus, Task, TaskStatus


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
        """Move one row to `to` if its status is an allowed source (or one of `expect`).

        `where` adds conditions to the compare-and-set (e.g. `version`). Returns
        the row count (0 or 1); with `strict` a 0 raises NotEligible. `obj`, the
        caller's instance of the row, takes what was written when the move is made
        (a field written as an expression is left to be read again on access), so
        the caller need not read the row back.
        """
        self._in_transaction()
        qs = self.model.objects.filter(pk=pk, status__in=self.sources(to, expect))
        if where:
            qs = qs.filter(**where)
        if self.versioned:
            fields["version"] = F("version") + 1
        updated = qs.update(status=to, **fields)
        if updated != 1:
            if strict:
                current = self.model.objects.filter(pk=pk).values_list("status", flat=True).first()
                raise NotEligible(
                    f"{self.name.capitalize()} #{pk} is {current or 'gone'}; it cannot become {to} now.",
                    reason="status_changed",
                    status=current,
                )
            return 0
        if obj is not None:
            obj.status = to
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
        ids = list(queryset.filter(status__in=sources).values_list("pk", flat=True))
        if not ids:
            return []
        if self.versioned:
            fields["version"] = F("version") + 1
        self.model.objects.filter(pk__in=ids, status__in=sources).update(status=to, **fields)
        return ids

    @staticmethod
    def _in_transaction() -> None:
        if not connection.in_atomic_block:
            raise IllegalTransition("a status move must run inside its service's transaction")

    def allowed(self, source: str, to: str) -> bool:
        return to in self.table.get(source, frozenset())


R, T, M = RunStatus, TaskStatus, MessageStatus

RUNS = Machine(
    Run,
    {
        # queued → stopped: a person's Stop before any worker started it (the stop is verified).
        # queued → failed: refused at admission, before any worker started it (the workspace
        # no longer matches its manifest: `workspace_validation_failed`).
        R.QUEUED: frozenset({R.RUNNING, R.CANCELLED, R.STOPPED, R.FAILED}),
        R.RUNNING: frozenset({R.SUCCEEDED, R.FAILED, R.STOPPING, R.INTERRUPTED}),
        # stopping → succeeded: every step had completed before the worker saw the stop.
        R.STOPPING: frozenset({R.STOPPED, R.SUCCEEDED}),
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
        M.WAITING: frozenset({M.ADMITTED, M.NOT_DELIVERED}),
        # admitted → waiting: its run was cancelled before a worker started it.
        M.ADMITTED: frozenset({M.DELIVERED, M.WAITING, M.NOT_DELIVERED}),
    },
    "message",
)

OPEN_TASK_STATUSES = (T.TODO, T.IN_PROGRESS, T.BLOCKED)
