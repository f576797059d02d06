"""The recovery breaker (DESIGN §14): counting the failures that open recovery, tripping, the cool-off and its
one trial continuation, and an admin's close.

The supervisor records each run whose recovery it opens (`failure_record`, in its transaction) and asks the
breakers in force on the run's agent whether an automatic continuation may be created (`automatic_admission`).
A breaker in force holds every continuation of its agent, whatever the signature: the agent's recent failures
say its deploy or its provider is broken, so continuing any of its tasks automatically would feed the storm.
The runs it holds stay awaiting recovery: the first supervisor pass after the breaker closes continues them.
"""

from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from recovery import limits
from recovery.action_log import blocking_cause
from recovery.models import BREAKER_IN_FORCE, BreakerState, RecoveryBreaker, RecoveryFailure
from recovery.rules import breaker as rule
from recovery.transitions import BREAKERS
from tasks.authz import require_role
from tasks.errors import Invalid, NotEligible, NotFound
from tasks.events import event_append
from tasks.models import Role, Run
from tasks.selectors import memberships_of
from tasks.transitions import NewEvent

REASON_MAX = 500
# Failures are kept while a window or a recent breaker's page may count them (the breakers list shows a week).
FAILURES_KEPT = timedelta(days=8)


def breaker_limits(org_id: int | None = None) -> tuple[int, int, int]:
    """(tasks, window seconds, cool-off seconds) of the organization (its own where an admin set them, else the
    deployment's), read at each use, so a changed setting applies at once. No organization: the defaults."""
    lim = limits.limits_for(org_id) if org_id is not None else limits.defaults()
    return lim.breaker_tasks, lim.breaker_window_seconds, lim.breaker_cooloff_seconds


def _payload(b: RecoveryBreaker, **more) -> dict:
    return {"breaker": b.pk, "agent": b.agent.name, "signature": b.signature, "tasks": b.tasks, **more}


def _event(b: RecoveryBreaker, kind: str, actor, **more) -> NewEvent:
    return NewEvent(kind, actor, b.org_id, None, None, _payload(b, **more))


def failure_of(run: Run, diagnosis) -> tuple[str, str]:
    """(signature, tool) of a run whose recovery opens (recovery.rules.breaker says how it is built)."""
    steps = [rule.StepFailure(s.seq, s.tool, s.phase, s.parent_seq) for s in run.steps.all()]
    named = next((r.seq for r in diagnosis.reasons if r.seq is not None), None)
    tool = rule.failure_tool(steps, named)
    cause = blocking_cause(diagnosis) if diagnosis.reasons else diagnosis.disposition
    return rule.failure_signature(tool=tool, error_code=run.error_code, cause=cause), tool


def failure_record(run: Run, diagnosis, *, now=None) -> RecoveryBreaker | None:
    """Record that recovery opens for `run` (once per run), in the caller's transaction, and trip the breaker of
    its agent and signature when more distinct tasks than its organization's threshold did so within its window.

    Returns the breaker this call opened, or None. Two supervisors tripping it at once make one breaker: the
    partial unique index `breaker_one_in_force` refuses the second insert, which then counts into the first.
    """
    now = now or timezone.now()
    signature, tool = failure_of(run, diagnosis)
    try:
        with transaction.atomic():
            RecoveryFailure.objects.create(
                org_id=run.org_id,
                agent_id=run.task.agent_id,
                task_id=run.task_id,
                run=run,
                signature=signature,
                tool=tool,
                at=now,
            )
    except IntegrityError:
        return None  # this run was counted when it was first looked at
    threshold, window, _ = breaker_limits(run.org_id)
    hits = RecoveryFailure.objects.filter(org_id=run.org_id, agent_id=run.task.agent_id, signature=signature)
    in_force = (
        RecoveryBreaker.objects.select_for_update()
        .filter(org_id=run.org_id, agent_id=run.task.agent_id, signature=signature, state__in=BREAKER_IN_FORCE)
        .first()
    )
    if in_force is not None:
        tasks = hits.filter(at__gte=in_force.first_at).values("task").distinct().count()
        RecoveryBreaker.objects.filter(pk=in_force.pk).update(tasks=tasks, last_at=now)
        return None
    recent = hits.filter(at__gte=now - timedelta(seconds=window))
    tasks = recent.values("task").distinct().count()
    if not rule.trips(tasks_in_window=tasks, threshold=threshold):
        return None
    first_at = recent.order_by("at").values_list("at", flat=True).first() or now
    try:
        with transaction.atomic():
            b = RecoveryBreaker.objects.create(
                org_id=run.org_id,
                agent_id=run.task.agent_id,
                signature=signature,
                tool=tool,
                tasks=tasks,
                first_at=first_at,
                last_at=now,
                opened_at=now,
            )
            event_append(
                org_id=b.org_id,
                kind="breaker_opened",
                actor="supervisor",
                payload=_payload(b, state=BreakerState.OPEN, window_seconds=window, threshold=threshold),
            )
            return b
    except IntegrityError:
        return None  # another supervisor opened it first; this run counts into it on its next look


def automatic_admission(run: Run) -> tuple[str, list[RecoveryBreaker]]:
    """May an automatic continuation of `run` be created now? ("go" | "probe" | "hold", the breakers in force on
    its agent, locked until the caller's transaction ends, so two supervisors never both take the one trial)."""
    breakers = list(
        RecoveryBreaker.objects.select_for_update()
        .filter(org_id=run.org_id, agent_id=run.task.agent_id, state__in=BREAKER_IN_FORCE)
        .order_by("id")
    )
    decision = rule.automatic_admission(
        states=[b.state for b in breakers], probe_taken=any(b.probe_run_id is not None for b in breakers)
    )
    return decision, breakers


def trial_taken(breakers: list[RecoveryBreaker], continuation: Run) -> None:
    """The half-open breakers' one trial is `continuation` (in the transaction that created it)."""
    RecoveryBreaker.objects.filter(
        pk__in=[b.pk for b in breakers], state=BreakerState.HALF_OPEN, probe_run__isnull=True
    ).update(probe_run=continuation)


def breakers_sweep(*, now=None) -> dict[str, list[int]]:
    """A supervisor duty: half-open the breakers whose cool-off passed; close a half-open one whose trial
    continuation succeeded, open it again when the trial ended any other way. Each move is a compare-and-set.
    Failures older than any window or recent breaker needs are forgotten."""
    now = now or timezone.now()
    moved: dict[str, list[int]] = {"half_open": [], "closed": [], "reopened": []}
    # Each organization has its own cool-off: the open breakers (few) are read with theirs, at least the shortest.
    shortest = min(limits.BOUNDS["breaker_cooloff_seconds"][0], limits.defaults().breaker_cooloff_seconds)
    for b in RecoveryBreaker.objects.filter(
        state=BreakerState.OPEN, opened_at__lte=now - timedelta(seconds=shortest)
    ).select_related("agent", "org"):
        if b.opened_at > now - timedelta(seconds=limits.limits_of(b.org).breaker_cooloff_seconds):
            continue
        with transaction.atomic():
            if BREAKERS.move(
                b.pk,
                BreakerState.HALF_OPEN,
                expect=BreakerState.OPEN,
                where={"opened_at": b.opened_at},
                strict=False,
                half_open_at=now,
                probe_run=None,
                event=_event(b, "breaker_half_open", "supervisor", state=BreakerState.HALF_OPEN),
            ):
                moved["half_open"].append(b.pk)
    for b in RecoveryBreaker.objects.filter(state=BreakerState.HALF_OPEN, probe_run__isnull=False).select_related(
        "agent", "probe_run"
    ):
        to = rule.after_probe(b.probe_run.status)
        if to is None:
            continue
        with transaction.atomic():
            if to == BreakerState.CLOSED:
                reason = f"Its trial continuation, run #{b.probe_run_id}, succeeded."
                fields = {"closed_at": now, "closed_by": "supervisor", "reason": reason}
                event = _event(b, "breaker_closed", "supervisor", state=to, reason=reason, run=b.probe_run_id)
            else:
                reason = f"Its trial continuation, run #{b.probe_run_id}, ended {b.probe_run.status}."
                fields = {"opened_at": now, "probe_run": None, "reason": reason}
                event = _event(b, "breaker_opened", "supervisor", state=to, reason=reason, run=b.probe_run_id)
            if BREAKERS.move(
                b.pk,
                to,
                expect=BreakerState.HALF_OPEN,
                where={"probe_run": b.probe_run_id},
                strict=False,
                event=event,
                **fields,
            ):
                moved["closed" if to == BreakerState.CLOSED else "reopened"].append(b.pk)
    _, window, _ = breaker_limits()  # an organization's own window is at most a day, within FAILURES_KEPT
    RecoveryFailure.objects.filter(at__lt=now - max(FAILURES_KEPT, timedelta(seconds=window))).delete()
    return moved


@transaction.atomic
def breaker_close(*, user, breaker_id: int, reason: str) -> RecoveryBreaker:
    """An admin closes an open or half-open breaker, with a reason. The runs it held are continued by the next
    supervisor pass. NotFound outside the person's organizations, Forbidden below admin, Invalid without a
    reason, NotEligible when it is closed already."""
    b = (
        RecoveryBreaker.objects.select_for_update(of=("self",))
        .select_related("agent")
        .filter(pk=breaker_id, org_id__in=[m.org_id for m in memberships_of(user)])
        .first()
    )
    if b is None:
        raise NotFound(f"No breaker #{breaker_id}.")
    require_role(user, b.org_id, Role.ADMIN, what=f"No breaker #{breaker_id}.")
    reason = (reason or "").strip()
    if not reason:
        raise Invalid("Say why the breaker is closed: a reason is required.", field="reason", reason="reason_required")
    if b.state == BreakerState.CLOSED:
        raise NotEligible(f"Breaker #{b.pk} is closed already (by {b.closed_by}).", reason="breaker_closed")
    now = timezone.now()
    BREAKERS.move(
        b.pk,
        BreakerState.CLOSED,
        expect=b.state,
        closed_at=now,
        closed_by=user.get_username(),
        reason=reason[:REASON_MAX],
        event=_event(b, "breaker_closed", user, state=BreakerState.CLOSED, reason=reason[:REASON_MAX]),
    )
    b.refresh_from_db()
    return b
