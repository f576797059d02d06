"""Bulk triage (DESIGN §12): preview a frozen scope, execute exactly it, item by item, cancel midway.

- `bulk_preview` freezes the scope: every task id in order, the action each
  item acts on and its version, and the facts the preview saw (`seen`); it
  predicts what would be refused and why, and hashes the lot (`scope_hash`).
  Tasks that match the filter only later are never added.
- `bulk_execute` starts a preview the same person confirmed with its hash.
- The supervisor process runs started operations (`bulk_advance`, called from
  `manage.py supervise` between its passes) in bounded batches. Each item is one
  transaction: it locks the item, re-reads the task's facts, skips it when they
  differ from what the preview saw, else calls the very service a single click
  calls (with the actor's authority, version and gates), records the result by a
  compare-and-set on the item, and appends a `bulk_item` event on the task.
  Each batch appends one `bulk_progress` event; the last `bulk_finished`.
  Why the supervisor: it is its own process, so a web process that restarts
  mid-operation loses nothing; several supervisors share the work through row
  locks; nothing is kept in memory between batches, so a crash only re-runs the
  item whose transaction did not commit.
- `bulk_cancel` stops it between two items: the items not reached are skipped
  ("cancelled"), untouched.
"""

import hmac
import logging
import time
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser
from django.db import DatabaseError, connection, transaction
from django.db.models import Count
from django.utils import timezone

from recovery.actions import commands as recovery_actions
from recovery.actions import controls
from recovery.bulk.selectors import item_facts, operation
from recovery.models import BulkItem, BulkOperation, BulkResult, BulkStatus, RecoveryAttempt
from recovery.rules.bulk import ACTIONS, OUTCOMES, Params, ScopeHash, changes, seen, verdict
from recovery.transitions import BULK, BULK_ITEMS
from recovery.triage.board import matching_ids
from recovery.triage.filters import BoardFilter, text_ok
from recovery.words.bulk import bulk_changes
from recovery.workspaces import validation as workspaces
from recovery.workspaces.validation import WorkspaceHeld
from tasks import services
from tasks.authz import require_role
from tasks.errors import (
    Forbidden,
    GateClosed,
    Invalid,
    NotEligible,
    NotFound,
    ScopeChanged,
    ServiceError,
    StaleVersion,
)
from tasks.events import event_append
from tasks.models import Role, Task
from tasks.selectors import memberships_forget, primary_membership, visible_tasks
from tasks.services import actor_label
from tasks.transitions import NewEvent

log = logging.getLogger("recovery.bulk.operations")

CHUNK = 500  # tasks judged per query round at the preview
SAMPLE = 10
MAX_NOTE = 5_000
MAX_CONTINUE_NOTE = 500


def batch_size() -> int:
    return int(getattr(settings, "CONSOLE_BULK_BATCH", 50))


def preview_lifetime() -> timedelta:
    return timedelta(seconds=float(getattr(settings, "CONSOLE_BULK_PREVIEW_SECONDS", 900)))


def max_items() -> int:
    return int(getattr(settings, "CONSOLE_BULK_MAX_ITEMS", 100_000))


# --- preview -------------------------------------------------------------------------------


def _params(action: str, raw) -> dict:
    """The one note and the one consent every item gets; refused whole when malformed."""
    raw = raw if raw is not None else {}
    if not isinstance(raw, dict):
        raise Invalid("`params` must be an object.", field="params")
    out = {}
    accept = raw.get("accept_duplicate_risk", False)
    if not isinstance(accept, bool):
        raise Invalid("`accept_duplicate_risk` must be true or false.", field="accept_duplicate_risk")
    if action in ("retry", "decide") and accept:
        out["accept_duplicate_risk"] = True
    note = raw.get("note", "")
    if not isinstance(note, str) or not text_ok(note):
        raise Invalid("`note` must be text.", field="note")
    note = note.strip()
    limit = MAX_CONTINUE_NOTE if action == "continue" else MAX_NOTE
    if len(note) > limit:
        raise Invalid(f"A note holds at most {limit} characters.", field="note")
    if action in ("decide", "continue") and note:
        out["note"] = note
    if action == "decide":
        outcome = raw.get("outcome")
        if outcome not in OUTCOMES:
            raise Invalid(f"`outcome` must be one of {', '.join(OUTCOMES)}.", field="outcome")
        out["outcome"] = outcome
    return out


def _ids(values) -> list[int]:
    if not isinstance(values, list):
        raise Invalid("`ids` must be a list of task ids.", field="ids")
    if len(values) > max_items():
        raise Invalid(f"One operation holds at most {max_items():,} tasks.", field="ids")
    out = set()
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or not 0 < v < 2**63:
            raise Invalid("`ids` must hold task ids.", field="ids")
        out.add(v)
    return sorted(out)


def _chunks_of_ids(user, org_id: int, ids: list[int]):
    visible = visible_tasks(user).filter(org_id=org_id)
    for start in range(0, len(ids), CHUNK):
        chunk = ids[start : start + CHUNK]
        found = set(visible.filter(pk__in=chunk).values_list("pk", flat=True))
        missing = next((i for i in chunk if i not in found), None)
        if missing is not None:
            raise NotFound(f"No task #{missing}.", field="ids")
        yield chunk


def _org_of(user, org_id: int | None) -> int:
    if org_id is not None:
        return org_id
    membership = primary_membership(user)
    if membership is None:
        raise Forbidden("You are not a member of an organization.")
    return membership.org_id


@transaction.atomic
def bulk_preview(
    *, user, action: str, ids=None, filter=None, params=None, org_id: int | None = None, retry_of=None
) -> BulkOperation:
    """Freeze a scope for `action` (operator): by hand (`ids`) or every task matching a board `filter`.

    Nothing is done to any task. Refused whole when the selection is empty,
    larger than CONSOLE_BULK_MAX_ITEMS, names a task the person cannot see (404,
    like one that does not exist), or the parameters are malformed.
    """
    if action not in ACTIONS:
        raise Invalid(f"`action` must be one of {', '.join(ACTIONS)}.", field="action")
    org_id = _org_of(user, org_id)
    require_role(user, org_id, Role.OPERATOR)
    if (ids is None) == (filter is None):
        raise Invalid("Choose the tasks: give either `ids` or `filter`.", field="ids")
    values = _params(action, params)
    if ids is not None:
        ids = _ids(ids)
        chunks, selection = _chunks_of_ids(user, org_id, ids), {"ids": len(ids)}
    else:
        board = BoardFilter.parse(filter, strict=True)
        chunks, selection = matching_ids(user, board, org_id=org_id, chunk=CHUNK), {"filter": board.params()}
    now = timezone.now()
    op = BulkOperation.objects.create(
        org_id=org_id,
        actor=user,
        actor_name=actor_label(user),
        action=action,
        params=values,
        selection=selection,
        retry_of=retry_of,
        scope_hash="",
        expires_at=now + preview_lifetime(),
    )
    rules = Params(**values)
    digest = ScopeHash(action, values)
    refusals: Counter = Counter()
    position = 0
    for chunk in chunks:
        facts = item_facts(chunk)
        items = []
        for task_id in chunk:
            if position >= max_items():
                raise Invalid(f"One operation holds at most {max_items():,} tasks: narrow the filter.", field="filter")
            _, f = facts[task_id]
            v = verdict(action, rules, f)
            frozen = seen(f, v)
            target = v.action
            items.append(
                BulkItem(
                    op=op,
                    position=position,
                    task_id=task_id,
                    action_id=target.id if target else None,
                    version=target.version if target else None,
                    seen=frozen,
                    predicted=v.refusal,
                )
            )
            digest.add(task=task_id, action=target.id if target else None, version=items[-1].version, seen=frozen)
            if v.refusal:
                refusals[v.refusal] += 1
            position += 1
        BulkItem.objects.bulk_create(items)
    if position == 0:
        raise Invalid(
            "No task matches this selection: nothing to preview.", field="ids" if ids is not None else "filter"
        )
    BulkOperation.objects.filter(pk=op.pk).update(
        count=position, refusals=dict(refusals), scope_hash=digest.hexdigest()
    )
    event_append(
        org_id=org_id,
        kind="bulk_previewed",
        actor=user,
        payload={"bulk": op.pk, "action": action, "count": position, "retry_of": retry_of.pk if retry_of else None},
    )
    op.refresh_from_db()
    return op


def bulk_retry_failed(*, user, op_id: int, accept_duplicate_risk: bool = False) -> BulkOperation:
    """A new preview of the same action on the tasks whose items failed; the consent is the asker's own."""
    op = operation(user, op_id)
    require_role(user, op.org_id, Role.OPERATOR)  # the role first: a viewer learns nothing of its items
    if op.status not in (BulkStatus.FINISHED, BulkStatus.CANCELLED):
        raise NotEligible(f"Bulk #{op.pk} is {op.status}: its failures are known once it ends.", reason="not_ended")
    ids = list(
        BulkItem.objects.filter(op=op, result=BulkResult.FAILED, task__in=visible_tasks(user))
        .order_by("position")
        .values_list("task_id", flat=True)
    )
    if not ids:
        raise NotEligible(f"Nothing of bulk #{op.pk} failed: there is nothing to retry.", reason="nothing_failed")
    params = {k: v for k, v in op.params.items() if k != "accept_duplicate_risk"}
    if accept_duplicate_risk:
        params["accept_duplicate_risk"] = True
    return bulk_preview(user=user, action=op.action, ids=ids, params=params, org_id=op.org_id, retry_of=op)


# --- execute and cancel -----------------------------------------------------------------------


def _locked(user, op_id: int) -> BulkOperation:
    op = operation(user, op_id)
    return BulkOperation.objects.select_for_update().get(pk=op.pk)


@transaction.atomic
def bulk_execute(*, user, op_id: int, scope_hash) -> BulkOperation:
    """previewed → running: the person who previewed it confirms exactly that scope.

    Refused: by anyone else (their consent and note are not the preview's), after
    the preview expired, when `scope_hash` is not the preview's (409
    `scope_changed`), or when it already started or was discarded.
    """
    op = _locked(user, op_id)
    require_role(user, op.org_id, Role.OPERATOR)
    if op.actor_id != user.pk:
        raise Forbidden(f"Only {op.actor_name}, who previewed it, can execute bulk #{op.pk}: preview it yourself.")
    if op.status != BulkStatus.PREVIEWED:
        raise NotEligible(
            f"Bulk #{op.pk} is {op.status}; only a preview can be executed.", reason="not_a_preview", status=op.status
        )
    now = timezone.now()
    if op.expires_at <= now:
        raise NotEligible(
            f"This preview expired at {op.expires_at:%H:%M} UTC: preview again, to see the tasks as they are now.",
            reason="preview_expired",
        )
    if not isinstance(scope_hash, str) or not hmac.compare_digest(scope_hash, op.scope_hash):
        raise ScopeChanged(
            f"The scope you confirmed is not the scope of bulk #{op.pk}: preview again and confirm what it shows."
        )
    BULK.move(
        op.pk,
        BulkStatus.RUNNING,
        expect=BulkStatus.PREVIEWED,
        started_at=now,
        event=NewEvent("bulk_started", user, op.org_id, None, None, {"bulk": op.pk, "count": op.count}),
    )
    op.refresh_from_db()
    return op


@transaction.atomic
def bulk_cancel(*, user, op_id: int) -> BulkOperation:
    """Stop it between two items (operator): what was done stays done; every item not reached is skipped.

    A preview is discarded the same way. An item being applied at that moment
    finishes first (its row is locked), then the rest are skipped.
    """
    op = _locked(user, op_id)
    require_role(user, op.org_id, Role.OPERATOR)
    if op.status not in (BulkStatus.PREVIEWED, BulkStatus.RUNNING):
        raise NotEligible(f"Bulk #{op.pk} is {op.status}; there is nothing to cancel.", reason="not_running")
    now = timezone.now()
    pending = BulkItem.objects.filter(op=op)
    skipped = len(BULK_ITEMS.move_all(pending, BulkResult.SKIPPED, reason="cancelled", done_at=now))
    BULK.move(
        op.pk,
        BulkStatus.CANCELLED,
        expect=op.status,
        finished_at=now,
        cancelled_by=actor_label(user),
        event=NewEvent(
            "bulk_cancelled", user, op.org_id, None, None, {"bulk": op.pk, "skipped": skipped, "was": op.status}
        ),
    )
    op.refresh_from_db()
    return op


# --- the executor ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    result: str
    reason: str = ""
    detail: str = ""
    run: int | None = None


STOP = -1


def bulk_advance(*, budget: float = 2.0, batch: int | None = None) -> int:
    """Run batches of started operations, oldest first and in turn, for about `budget` seconds.

    Returns the number of items settled. Called by the supervisor between its
    passes; safe to call from any number of processes at once.
    """
    deadline = time.monotonic() + budget
    settled = 0
    while time.monotonic() < deadline:
        running = list(
            BulkOperation.objects.filter(status=BulkStatus.RUNNING)
            .order_by("started_at", "id")
            .values_list("pk", flat=True)[:20]
        )
        if not running:
            break
        progressed = 0
        for op_id in running:
            progressed += bulk_batch(op_id, size=batch)
            if time.monotonic() >= deadline:
                break
        settled += progressed
        if not progressed:
            break
    return settled


def _actor(op: BulkOperation):
    """The person the items act for; each item reads their memberships again (`_item`)."""
    user = get_user_model().objects.filter(pk=op.actor_id).first() if op.actor_id else None
    return user or AnonymousUser()


def bulk_batch(op_id: int, *, size: int | None = None) -> int:
    """Settle up to `size` pending items of one running operation, then record its progress (or its end)."""
    op = BulkOperation.objects.filter(pk=op_id, status=BulkStatus.RUNNING).first()
    if op is None:
        return 0
    user = _actor(op)
    pending = list(
        BulkItem.objects.filter(op=op, result=BulkResult.PENDING)
        .order_by("position")
        .values_list("pk", flat=True)[: size or batch_size()]
    )
    settled = 0
    for item_id in pending:
        done = _item(op, item_id, user)
        if done == STOP:
            break
        settled += done
    _progress(op, settled)
    return settled


def _item(op: BulkOperation, item_id: int, user) -> int:
    if op.action in ("retry", "decide", "continue"):
        # A continuation validates the task's workspace: it is read before the item's transaction.
        task_id = BulkItem.objects.filter(pk=item_id).values_list("task_id", flat=True).first()
        with workspaces.read_ahead_for_task(task_id, user):
            return _item_locked(op, item_id, user)
    return _item_locked(op, item_id, user)


def _item_locked(op: BulkOperation, item_id: int, user) -> int:
    try:
        with transaction.atomic():
            qs = BulkItem.objects.filter(pk=item_id, result=BulkResult.PENDING)
            if connection.features.has_select_for_update_skip_locked:
                qs = qs.select_for_update(skip_locked=True)  # another executor holds it: leave it to that one
            item = qs.first()
            if item is None:
                return 0
            if BulkOperation.objects.filter(pk=op.pk).values_list("status", flat=True).first() != BulkStatus.RUNNING:
                return STOP  # cancelled meanwhile: the cancel skips what is left
            # The role is read again for every item, in its transaction: a role lost midway is seen at once,
            # not at the next batch.
            memberships_forget(user)
            _record(op, item, _apply(op, item, user), user)
            return 1
    except Exception as exc:  # the item's own transaction failed (a database error outside a service)
        log.exception("bulk #%s item %s failed", op.pk, item_id)
        with transaction.atomic():
            item = BulkItem.objects.filter(pk=item_id, result=BulkResult.PENDING).first()
            if item is None:
                return 0
            _record(op, item, Outcome(BulkResult.FAILED, "error", f"{type(exc).__name__}: {exc}"[:500]), user)
        return 1


def _apply(op: BulkOperation, item: BulkItem, user) -> Outcome:
    """Re-judge the item on facts read now; act through the single-click service only if nothing changed."""
    found = item_facts([item.task_id], user=user, breakers=False).get(item.task_id)
    if found is None:
        return Outcome(BulkResult.SKIPPED, "not_visible")
    task, facts = found
    params = Params(**op.params)
    v = verdict(op.action, params, facts)
    diff = changes(item.seen, seen(facts, v))
    if diff:
        return Outcome(BulkResult.SKIPPED, "changed_since_preview", bulk_changes(diff))
    if v.refusal:
        return Outcome(BulkResult.SKIPPED, v.refusal, v.detail)
    try:
        with transaction.atomic():  # a refusal undoes this item's change only
            return _call(op, item, task, params, user)
    except StaleVersion as exc:
        return Outcome(BulkResult.SKIPPED, "changed_since_preview", exc.detail)
    except GateClosed as exc:
        return Outcome(BulkResult.SKIPPED, exc.gate, exc.detail)
    except NotFound as exc:
        return Outcome(BulkResult.SKIPPED, "not_visible", exc.detail)
    except ServiceError as exc:
        if exc.status_code == 409:  # the service's own precondition: not eligible, needs a decision, closed
            return Outcome(BulkResult.SKIPPED, exc.extra.get("reason") or exc.code, exc.detail)
        return Outcome(BulkResult.FAILED, exc.code, exc.detail)
    except DatabaseError as exc:
        log.exception("bulk #%s: task #%s", op.pk, item.task_id)
        return Outcome(BulkResult.FAILED, "error", f"{type(exc).__name__}: {exc}"[:500])


def _call(op: BulkOperation, item: BulkItem, task: Task, params: Params, user) -> Outcome:
    """The service a single click calls, with the version the preview saw."""
    a = op.action
    try:
        if a == "retry":
            attempt = recovery_actions.action_retry(
                action_id=item.action_id,
                user=user,
                version=item.version,
                accept_duplicate_risk=params.accept_duplicate_risk,
            )
            return Outcome(BulkResult.APPLIED, run=attempt.continuation_run_id)
        if a == "decide":
            recovery_actions.action_decide(
                action_id=item.action_id,
                user=user,
                version=item.version,
                outcome=params.outcome,
                note=params.note,
                accept_duplicate_risk=params.accept_duplicate_risk,
            )
            attempt = RecoveryAttempt.objects.filter(action_id=item.action_id).order_by("-number").first()
            run = attempt.continuation_run_id if attempt and params.outcome != "unresolved" else None
            return Outcome(BulkResult.APPLIED, run=run)
        if a == "cancel":
            recovery_actions.action_cancel(action_id=item.action_id, user=user, version=item.version)
            return Outcome(BulkResult.APPLIED)
        if a == "pause":
            services.task_pause(actor=user, task=task)
            return Outcome(BulkResult.APPLIED)
        if a == "resume":
            services.task_resume(actor=user, task=task)
            return Outcome(BulkResult.APPLIED)
        done = controls.task_continue(user=user, task_id=task.pk, note=params.note)
    except WorkspaceHeld as held:
        # The continuation was refused by workspace validation; its refused run and workspace action are kept.
        return Outcome(BulkResult.FAILED, "workspace_hold", held.detail)
    if done.held is not None:
        return Outcome(BulkResult.FAILED, "workspace_hold", done.held.detail)
    if done.run is None and done.gate is not None:
        # A bound (attempts or the chain used up): the gate, and who lifts it, as a single click is told.
        return Outcome(BulkResult.SKIPPED, done.gate.gate, f"{done.gate.detail} Lifted by {done.gate.lifted_by}.")
    if done.run is None:
        return Outcome(BulkResult.SKIPPED, "needs_decision", done.detail)
    return Outcome(BulkResult.APPLIED, run=done.run.pk)


def _record(op: BulkOperation, item: BulkItem, outcome: Outcome, user) -> None:
    """pending → applied | skipped | failed, once, with the item's event on its task."""
    updated = BULK_ITEMS.move(
        item.pk,
        outcome.result,
        strict=False,
        reason=outcome.reason[:48],
        detail=outcome.detail[:500],
        run_id=outcome.run,
        done_at=timezone.now(),
    )
    if updated != 1:
        raise RuntimeError(f"bulk #{op.pk} item {item.pk} was settled twice")  # rolls the item's change back
    event_append(
        org_id=op.org_id,
        task_id=item.task_id,
        run_id=outcome.run,
        kind="bulk_item",
        actor=user if user.is_authenticated else op.actor_name,
        payload={"bulk": op.pk, "action": op.action, "result": outcome.result, "reason": outcome.reason},
    )


def _progress(op: BulkOperation, settled: int) -> None:
    """One event per batch: where the operation stands; the last one finishes it."""
    with transaction.atomic():
        tally = dict(BulkItem.objects.filter(op=op).order_by().values_list("result").annotate(n=Count("id")))
        payload = {
            "bulk": op.pk,
            "applied": tally.get(BulkResult.APPLIED, 0),
            "skipped": tally.get(BulkResult.SKIPPED, 0),
            "failed": tally.get(BulkResult.FAILED, 0),
            "pending": tally.get(BulkResult.PENDING, 0),
        }
        if payload["pending"] == 0:
            BULK.move(
                op.pk,
                BulkStatus.FINISHED,
                expect=BulkStatus.RUNNING,
                strict=False,
                finished_at=timezone.now(),
                event=NewEvent("bulk_finished", op.actor_name, op.org_id, None, None, payload),
            )
        elif settled:
            event_append(org_id=op.org_id, kind="bulk_progress", actor=op.actor_name, payload=payload)
