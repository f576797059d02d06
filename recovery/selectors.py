"""Reads of tasks with their recovery state, for pages and the API. Query counts do not grow with data."""

import re
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db.models import Count, Exists, F, OuterRef, Prefetch, Q, Subquery, Sum, TextField
from django.db.models.functions import Cast, Coalesce
from django.utils import timezone

from recovery.models import (
    BREAKER_IN_FORCE,
    LIVE_ACTION_STATUSES,
    ActionStatus,
    RecoveryAction,
    RecoveryAttempt,
    RecoveryBreaker,
    RecoveryFailure,
)
from recovery.modes import Change, changes_of, modes_now, subagent_names
from recovery.rules.breaker import BreakerFacts
from recovery.rules.classify import WORKSPACE_KINDS, Diagnosis, RunFacts, StepFacts, classify
from recovery.rules.gates import BOUNDS, AdmissionFacts, first_closed_gate
from tasks.errors import NotFound
from tasks.holds import Hold
from tasks.models import (
    LEASED_RUN_STATUSES,
    Agent,
    Event,
    Message,
    MessageStatus,
    Run,
    RunKind,
    RunStatus,
    Step,
    Task,
    effective_continuation,
    refused_at_admission,
)
from tasks.modes import known_tools
from tasks.selectors import (
    chain_runs,
    counted_runs,
    memberships_of,
    task_facts,
    visible_runs,
    visible_tasks,
    visible_tasks_q,
)


def _latest_run(field: str = "pk"):
    return Subquery(Run.objects.filter(task=OuterRef("pk")).order_by("-id").values(field)[:1])


def _message_count(status: str):
    return Coalesce(
        Subquery(
            Message.objects.filter(task=OuterRef("pk"), status=status)
            .order_by()
            .values("task")
            .annotate(n=Count("pk"))
            .values("n")[:1]
        ),
        0,
    )


def awaiting_recovery(task_ref=None):
    """Runs the supervisor takes up on its next pass: interrupted, or stopped by a pause or the budget, that
    nothing has handled yet (no continuation, no action, no fresh start since), of an open task.
    `task_ref` narrows them to one task (an OuterRef for an annotation)."""
    qs = (
        Run.objects.filter(
            Q(status=RunStatus.INTERRUPTED) | Q(status=RunStatus.STOPPED, stop_reason__in=("paused", "budget"))
        )
        .exclude(Exists(Run.objects.filter(effective_continuation(), continues=OuterRef("pk"))))
        # A later run that continues nothing is a fresh start: the old chain is not recovered.
        .exclude(Exists(Run.objects.filter(task=OuterRef("task"), pk__gt=OuterRef("pk"), continues__isnull=True)))
        .exclude(Exists(RecoveryAction.objects.filter(run=OuterRef("pk"))))
        .exclude(task__status__in=("done", "cancelled"))
    )
    return qs if task_ref is None else qs.filter(task=task_ref)


def annotate_state(qs):
    live = RecoveryAction.objects.filter(task=OuterRef("pk"))
    open_dependency = Task.dependencies.through.objects.filter(from_task_id=OuterRef("pk")).exclude(
        to_task__status="done"
    )
    return qs.annotate(
        has_exhausted=Exists(live.filter(status=ActionStatus.EXHAUSTED)),
        has_open=Exists(live.filter(status=ActionStatus.OPEN)),
        has_open_dependency=Exists(open_dependency),
        current_run_id=_latest_run(),
        current_run_status=_latest_run("status"),
        # What moves an idle task on by itself, so a row never says "nothing is scheduled" beside it.
        followups_waiting=_message_count(MessageStatus.WAITING),
        followups_undelivered=_message_count(MessageStatus.NOT_DELIVERED),
        awaiting_run_id=Subquery(awaiting_recovery(OuterRef("pk")).order_by("-id").values("pk")[:1]),
        # A recovery breaker in force on the task's agent holds its automatic continuation (DESIGN §14).
        breaker_held=Subquery(
            RecoveryBreaker.objects.filter(
                org_id=OuterRef("org_id"), agent_id=OuterRef("agent_id"), state__in=BREAKER_IN_FORCE
            )
            .order_by("id")
            .values("pk")[:1]
        ),
    )


_bases = threading.local()


def tasks_with_state():
    """annotate_state(Task.objects.all()), built once per thread: building its subqueries (resolving every
    OuterRef) costs ~10 ms of Python, several times what the query takes to run; each caller filters a clone (a
    filter never changes the queryset it is called on). Per thread, so no two threads compile the same expressions
    at once."""
    base = getattr(_bases, "tasks", None)
    if base is None:
        base = _bases.tasks = annotate_state(Task.objects.all())
    return base


def state_filter(qs, state: str):
    """The SQL twin of api_shapes.task_state; keep the two in the same order."""
    if state == "all":
        return qs
    if state == "cancelled":
        return qs.filter(status=state)
    qs = qs.exclude(status="cancelled")
    if state == "exhausted":
        return qs.filter(has_exhausted=True)
    qs = qs.filter(has_exhausted=False)
    if state == "needs_decision":
        return qs.filter(has_open=True)
    qs = qs.filter(has_open=False)
    if state == "done":
        return qs.filter(status=state)
    qs = qs.exclude(status="done")
    stopping = Q(current_run_status="stopping")
    running = Q(current_run_status="running")
    if state == "stopping":
        return qs.filter(stopping)
    if state == "running":
        return qs.filter(running)
    if state == "active":  # the board's Running tab: executing, stopping included
        return qs.filter(running | stopping)
    qs = qs.exclude(running | stopping)
    # A gate holds it; a task that merely has nothing scheduled is idle, not blocked.
    blocked = (
        Q(paused=True) | Q(budget_limit__isnull=False, budget_used__gte=F("budget_limit")) | Q(has_open_dependency=True)
    )
    queued = Q(current_run_status="queued")
    if state == "blocked":
        return qs.filter(blocked)
    qs = qs.exclude(blocked)
    if state == "queued":
        return qs.filter(queued)
    qs = qs.exclude(queued)
    if state == "follow_through":
        return qs.filter(FOLLOW_THROUGH)
    return qs


# Idle tasks nothing moves on by itself while they still owe something: their last run failed, or was
# interrupted with nothing taking it up, or follow-ups wait to be delivered (or were not).
FOLLOW_THROUGH = (
    Q(current_run_status=RunStatus.FAILED)
    | Q(current_run_status=RunStatus.INTERRUPTED, awaiting_run_id__isnull=True)
    | Q(followups_waiting__gt=0)
    | Q(followups_undelivered__gt=0)
)


def action_prefetch(live_only: bool):
    qs = RecoveryAction.objects.select_related("original_owner", "run").prefetch_related(
        Prefetch(
            "attempt_history", queryset=RecoveryAttempt.objects.select_related("continuation_run").order_by("number")
        ),
        "repairs__requested_by",
    )
    if live_only:
        qs = qs.filter(status__in=LIVE_ACTION_STATUSES)
    return Prefetch("actions", queryset=qs.order_by("-id"), to_attr="action_list")


def attach_current_runs(tasks: list[Task]) -> None:
    ids = [t.current_run_id for t in tasks if getattr(t, "current_run_id", None)]
    # Its agent with it: pages link a run by its agent's name (one query, not one more per task).
    runs = {r.pk: r for r in Run.objects.filter(pk__in=ids).select_related("agent")}
    for t in tasks:
        t.current_run = runs.get(getattr(t, "current_run_id", None))


MAX_QUERY = 200  # characters of a search that are used


def search_q(q: str) -> Q:
    """What a board search matches: the title, the task's or one of its runs' id ("#12", "run 12"), a run's
    or a step's error text, a step's tool or its arguments. One condition on the page's own query: the board
    still reads one page, however many runs and steps there are."""
    number = re.sub(r"^(?:run\s*)?#?\s*", "", q, flags=re.I)
    # ASCII digits only: "²".isdigit() is true and int() refuses it; an id has at most 18 digits.
    is_id = number.isascii() and number.isdigit() and len(number) <= 18
    runs = Run.objects.filter(task=OuterRef("pk"))
    steps = Step.objects.filter(run__task=OuterRef("pk"))
    match = (
        Q(title__icontains=q)
        | Exists(runs.filter(error_detail__icontains=q))
        | Exists(steps.filter(Q(error__icontains=q) | Q(tool__iexact=q)))
        | Exists(steps.annotate(args_text=Cast("args", TextField())).filter(args_text__icontains=q))
    )
    if is_id:
        match |= Q(pk=int(number)) | Exists(runs.filter(pk=int(number)))
    return match


def task_queryset(user, *, state: str, q: str):
    """Visible tasks in `state` (the SQL twin of api_shapes.task_state) matching the search `q` (`search_q`)."""
    qs = annotate_state(visible_tasks(user))
    qs = state_filter(qs, state)
    q = (q or "").strip()[:MAX_QUERY]
    if q:
        qs = qs.filter(search_q(q))
    return qs


def task_page(user, *, state: str = "all", q: str = "", cursor=None, limit: int = 50):
    """One page of visible tasks, newest first, and the cursor (an id) of the next (keyset, no OFFSET).

    The board's orders (last change, urgency) and filters are recovery.triage's (board.py).
    """
    qs = task_queryset(user, state=state, q=q).select_related("agent")
    if cursor is not None:
        qs = qs.filter(pk__lt=int(cursor))
    tasks = list(qs.order_by("-id").prefetch_related(action_prefetch(live_only=True))[: limit + 1])
    more = len(tasks) > limit
    tasks = tasks[:limit]
    attach_current_runs(tasks)
    return tasks, (tasks[-1].pk if more and tasks else None)


def task_detail(user, task_id: int) -> Task:
    visible = visible_tasks_q(user)
    if visible is None:
        raise NotFound(f"No task #{task_id}.")
    task = (
        tasks_with_state()
        .filter(visible)
        .select_related("agent", "org", "creator")
        .prefetch_related(
            action_prefetch(live_only=False),
            Prefetch(
                "messages",
                queryset=Message.objects.select_related("author").order_by("created_at", "id"),
                to_attr="message_list",
            ),
            Prefetch(
                "runs",
                queryset=Run.objects.order_by("id").only("id", "task_id", "status", "attempt"),
                to_attr="run_list",
            ),
        )
        .filter(pk=task_id)
        .first()
    )
    if task is None:
        raise NotFound(f"No task #{task_id}.")
    attach_current_runs([task])
    return task


def run_detail(user, run_id: int) -> Run:
    run = (
        visible_runs(user)
        .select_related("task", "agent__profile")
        .prefetch_related(Prefetch("steps", queryset=Step.objects.order_by("seq"), to_attr="step_list"))
        .filter(pk=run_id)
        .first()
    )
    if run is None:
        raise NotFound(f"No run #{run_id}.")
    return run


# --- diagnosis ---------------------------------------------------------------


def breaker_facts(breaker: RecoveryBreaker, agent_name: str) -> BreakerFacts:
    return BreakerFacts(
        breaker_id=breaker.pk,
        agent=agent_name,
        signature=breaker.signature,
        tasks=breaker.tasks,
        span_seconds=(breaker.last_at - breaker.first_at).total_seconds(),
        state=breaker.state,
    )


def breakers_in_force(org_id: int, agent_ids=None):
    """The breakers open or half-open in an organization (of some agents), oldest first."""
    qs = RecoveryBreaker.objects.filter(org_id=org_id, state__in=BREAKER_IN_FORCE).select_related("agent")
    if agent_ids is not None:
        qs = qs.filter(agent_id__in=agent_ids)
    return qs.order_by("opened_at", "id")


def breaker_on(task: Task) -> BreakerFacts | None:
    """The first breaker in force on the task's agent (it holds every continuation of that agent)."""
    breaker = breakers_in_force(task.org_id, [task.agent_id]).first()
    return breaker_facts(breaker, breaker.agent.name) if breaker is not None else None


def admission_facts(
    *,
    task: Task,
    source: Run,
    action: RecoveryAction | None = None,
    task_runs: dict[int, Run] | None = None,
    breaker_trial: bool = False,
) -> AdmissionFacts:
    """Everything the gates decide on, read now (never what a card showed). `breaker_trial`: the admission is a
    half-open breaker's one trial continuation, which the breaker lets through."""
    lease_live = (
        source.status in LEASED_RUN_STATUSES
        and source.lease_expires_at is not None
        and source.lease_expires_at > timezone.now()
    )
    workspace = (
        RecoveryAction.objects.filter(task_id=task.pk, kind__in=WORKSPACE_KINDS, status__in=LIVE_ACTION_STATUSES)
        .exclude(pk=action.pk if action is not None else None)
        .order_by("id")
        .values_list("id", "kind")
        .first()
    )
    return AdmissionFacts(
        task=task_facts(task),
        current_owner=task.agent.name,
        original_owner=action.original_owner.name if action else None,
        source_lease_live=lease_live,
        source_run_id=source.pk,
        attempts=action.attempts if action else 0,
        max_attempts=action.max_attempts if action else None,
        chain_length=counted_runs(chain_runs(source, task_runs)),
        workspace_action=workspace[0] if workspace else None,
        workspace_kind=workspace[1] if workspace else "",
        breaker=None if breaker_trial else breaker_on(task),
    )


def continuation_source(task: Task) -> Run | None:
    """The run a continuation of the task continues: its latest run, passing over runs cancelled before they
    started and runs refused at admission (neither ran anything to continue from)."""
    return (
        Run.objects.filter(task=task)
        .exclude(status=RunStatus.CANCELLED, started_at__isnull=True)
        .exclude(refused_at_admission())
        .order_by("-id")
        .first()
    )


def recorded_exhaustion(source: Run) -> RecoveryAction | None:
    """The latest action on `source` that was exhausted by a bound and then cancelled or retired with its
    exhaustion standing (an admin's grant clears it): the bound still holds the run."""
    return (
        RecoveryAction.objects.filter(run=source, exhaustion__in=BOUNDS, status__in=("cancelled", "retired"))
        .order_by("-id")
        .first()
    )


def current_gate(action: RecoveryAction, *, task_runs: dict[int, Run] | None = None) -> Hold | None:
    """The gate that would refuse an admission for this action right now, or None.

    With `task_runs` (every run of the task, by id) the chain is measured without queries.
    """
    return first_closed_gate(admission_facts(task=action.task, source=action.run, action=action, task_runs=task_runs))


def step_facts(step: Step) -> StepFacts:
    return StepFacts(
        seq=step.seq,
        tool=step.tool,
        args=step.args,
        phase=step.phase,
        recovery_mode=step.recovery_mode,
        parent_seq=step.parent_seq,
        has_result=step.result is not None,
        dispatched_at=step.dispatched_at,
        completed_at=step.completed_at,
        reused=step.reused_from_id is not None,
        error=step.error,
    )


def run_facts(run: Run, steps: list[Step] | None = None, *, task_runs: dict[int, Run] | None = None) -> RunFacts:
    """Facts for classify. With `task_runs` (every run of the task, steps prefetched
    as `step_list`) it reads nothing more from the database."""
    if steps is None:
        steps = getattr(run, "step_list", None)
        if steps is None:
            steps = list(run.steps.order_by("seq"))
    chain = chain_runs(run, task_runs)
    # Only interruptions count toward "interrupted twice": a verified stop (the run ended `stopped`, with a
    # receipt) left its step dispatched on purpose, so it counts against no bound.
    earlier_runs = [pk for pk, status in chain[:-1] if status != RunStatus.STOPPED]
    if task_runs is not None:
        # Nested steps count too: a batch is bounded item by item.
        earlier_seqs = [
            s.seq
            for rid in earlier_runs
            if rid in task_runs
            for s in task_runs[rid].step_list
            if s.phase == "dispatched"
        ]
    else:
        earlier_seqs = []
        if earlier_runs:
            earlier_seqs = Step.objects.filter(run_id__in=earlier_runs, phase="dispatched").values_list(
                "seq", flat=True
            )
    earlier: dict[int, int] = {}
    for seq in earlier_seqs:
        earlier[seq] = earlier.get(seq, 0) + 1
    return RunFacts(
        run_id=run.pk,
        status=run.status,
        plan=run.input,
        steps=tuple(step_facts(s) for s in steps),
        chain_length=counted_runs(chain),
        earlier_interruptions=earlier,
        recovery_disabled=run.recovery_disabled,
        dropped=tuple(d.get("seq") for d in (run.carry or {}).get("dropped", []) if isinstance(d, dict)),
        checkpoint_purged=checkpoint_purged(run),
        known_tools=agent_tools(run),
        agents=delegated_agents(run),
        kind=run.kind,
        pending=pending_seqs(run) if run.kind == RunKind.AGENT else (),
    )


def agent_tools(run: Run) -> frozenset[str]:
    """The tools the run's agent has now: its registered catalogue (and model turns), else the built-in ones."""
    profile = getattr(run.agent, "profile", None)
    return known_tools(profile.tool_catalogue if profile is not None else None)


def pending_seqs(run: Run) -> tuple[int, ...]:
    """Top-level steps of an agent run's chain that the run may plan again (its continuation did not carry
    them: cut off, never dispatched, decided not performed): not a gap in its numbering."""
    rerun = (run.carry or {}).get("rerun") or []
    return tuple(r["seq"] for r in rerun if isinstance(r, dict) and isinstance(r.get("seq"), int))


def delegated_agents(run: Run) -> frozenset[str] | None:
    """Which agents the plan's subagent steps name still exist (one query, only for a plan that delegates).

    The run's own agent cannot be deleted while it has runs; a subagent is named only in arguments.
    """
    steps = run.input.get("steps") if isinstance(run.input, dict) else None
    names = {
        s["args"]["agent"]
        for s in steps or []
        if isinstance(s, dict)
        and s.get("tool") == "subagent"
        and isinstance(s.get("args"), dict)
        and isinstance(s["args"].get("agent"), str)
    }
    if not names:
        return None
    return frozenset(Agent.objects.filter(org_id=run.org_id, name__in=names).values_list("name", flat=True))


def checkpoint_purged(run: Run) -> str:
    """Why the run's checkpoints are gone, or "" while they are kept.

    Hook for retention: when a run carries its purge mark (a timestamp set by
    the supervisor's purge), say so here in words, e.g. "Its checkpoints were
    purged on 2025-01-31 (kept 30 days)." Classification then reports
    `checkpoint_purged` and recovery is unavailable (start over or cancel).
    """
    purged_at = getattr(run, "checkpoint_purged_at", None)
    if purged_at is None:
        return ""
    when = purged_at.astimezone(UTC).strftime("%-d %b %Y at %H:%M UTC")  # words, not an ISO time
    return f"Its saved checkpoints were purged on {when} (retention); nothing is left to reuse."


def diagnose(run: Run, steps: list[Step] | None = None, *, task_runs: dict[int, Run] | None = None) -> Diagnosis:
    return classify(run_facts(run, steps, task_runs=task_runs))


@dataclass(frozen=True)
class RunUsage:
    """What a run's steps cost (tokens where they report tokens, else units).

    spent: this run's own finished steps; reused: what the steps it carried had cost when they ran (not spent
    again); spent_again: the part of `spent` on steps an earlier run of the chain had dispatched too (a model
    turn cut off mid-call and called again, a call run again after a decision).
    """

    spent: int
    reused: int
    spent_again: int
    again_steps: tuple[int, ...] = ()

    def as_dict(self) -> dict:
        return {"spent": self.spent, "reused": self.reused, "spent_again": self.spent_again}


def run_usage(run: Run, steps: list[Step], *, task_runs: dict[int, Run] | None = None) -> RunUsage:
    """At most two queries (none with `task_runs`, every run of the task with `step_list`)."""
    own = [s for s in steps if s.reused_from_id is None and s.phase in ("completed", "failed")]
    carried = [s.reused_from_id for s in steps if s.reused_from_id is not None]
    chain = [pk for pk, _ in chain_runs(run, task_runs)][:-1]
    if task_runs is not None:
        wanted = set(carried)
        originals = {s.pk: s.usage for r in task_runs.values() for s in r.step_list if s.pk in wanted}
        reused = sum(originals.get(pk, 0) for pk in carried)
        earlier = {
            (s.parent_seq, s.seq)
            for rid in chain
            if rid in task_runs
            for s in task_runs[rid].step_list
            if s.reused_from_id is None and s.dispatched_at is not None
        }
    else:
        reused = Step.objects.filter(pk__in=carried).aggregate(n=Sum("usage"))["n"] or 0 if carried else 0
        earlier = set(
            Step.objects.filter(run_id__in=chain, reused_from__isnull=True, dispatched_at__isnull=False).values_list(
                "parent_seq", "seq"
            )
        ) if chain else set()  # fmt: skip
    again = [s for s in own if (s.parent_seq, s.seq) in earlier]
    return RunUsage(
        spent=sum(s.usage for s in own),
        reused=reused,
        spent_again=sum(s.usage for s in again),
        again_steps=tuple(s.seq for s in again if s.parent_seq is None),
    )


def action_detail(user, action_id: int) -> RecoveryAction | None:
    return (
        RecoveryAction.objects.filter(pk=action_id, task__in=visible_tasks(user))
        .select_related("original_owner", "run", "task__agent", "org")
        .prefetch_related(
            Prefetch(
                "attempt_history",
                queryset=RecoveryAttempt.objects.select_related("continuation_run").order_by("number"),
            ),
            "repairs__requested_by",
        )
        .first()
    )


# --- agent settings ------------------------------------------------------------------


@dataclass(frozen=True)
class SettingChange:
    """One change of an agent's settings as the history shows it: who, when, what, from → to, why."""

    actor: str
    at: datetime
    change: Change
    reason: str
    event_id: int

    def as_api(self) -> dict:
        c = self.change
        entry = {"actor": self.actor, "at": self.at, "setting": c.setting, "from": c.before, "to": c.after}
        if c.tool is not None:
            entry["tool"] = c.tool
        entry["reason"] = self.reason
        return entry


def profile_history(org_id: int, agent_names=None, *, limit: int = 500) -> dict[str, list[SettingChange]]:
    """Agent name → its settings changes, newest first, from the organization's `profile_updated` events.

    One query (on the event index by organization and kind) whatever the number of agents;
    `limit` bounds the events read.
    """
    events = Event.objects.filter(org_id=org_id, kind="profile_updated")
    if agent_names is not None:
        events = events.filter(payload__agent__in=list(agent_names))
    history: dict[str, list[SettingChange]] = {}
    for event in events.order_by("-id")[:limit]:
        payload = event.payload if isinstance(event.payload, dict) else {}
        name = payload.get("agent")
        if not isinstance(name, str):
            continue
        reason = payload.get("reason") if isinstance(payload.get("reason"), str) else ""
        history.setdefault(name, []).extend(
            SettingChange(event.actor, event.created_at, c, reason, event.pk) for c in changes_of(payload)
        )
    return history


def step_modes_now(run: Run, steps) -> dict[int, str]:
    """Step pk → the mode the step would be planned with now, where that differs from its saved mode.

    Reads the run's agent profile as loaded (select `agent__profile`), plus one query
    when the run has nested subagent calls.
    """
    profile = getattr(run.agent, "profile", None)
    names = subagent_names(steps)
    subagents, catalogues = {}, {}
    if names:
        for agent in Agent.objects.filter(org_id=run.org_id, name__in=names).select_related("profile"):
            sub = getattr(agent, "profile", None)
            subagents[agent.name] = sub.tool_modes if sub else None
            catalogues[agent.name] = sub.tool_catalogue if sub else None
    return modes_now(
        steps,
        overrides=profile.tool_modes if profile else None,
        subagent_overrides=subagents,
        catalogue=profile.tool_catalogue if profile else None,
        subagent_catalogues=catalogues,
    )


# --- recovery breakers (DESIGN §14) ------------------------------------------------------------

BREAKER_RECENT_DAYS = 7


def breakers_recent(user, *, limit: int = 100):
    """The breakers of the person's organizations: every one in force, and those closed in the last week;
    newest first."""
    since = timezone.now() - timedelta(days=BREAKER_RECENT_DAYS)
    return (
        RecoveryBreaker.objects.filter(org_id__in=[m.org_id for m in memberships_of(user)])
        .filter(Q(state__in=BREAKER_IN_FORCE) | Q(closed_at__gte=since))
        .select_related("agent", "org")
        .order_by("-opened_at", "-id")[:limit]
    )


def breaker_visible(user, breaker_id: int) -> RecoveryBreaker:
    b = (
        RecoveryBreaker.objects.filter(pk=breaker_id, org_id__in=[m.org_id for m in memberships_of(user)])
        .select_related("agent", "org")
        .first()
    )
    if b is None:
        raise NotFound(f"No breaker #{breaker_id}.")
    return b


def breaker_tasks(breaker: RecoveryBreaker, user):
    """The tasks the breaker counted (the person may see), newest failure first."""
    failures = RecoveryFailure.objects.filter(
        org_id=breaker.org_id, agent_id=breaker.agent_id, signature=breaker.signature, at__gte=breaker.first_at
    )
    if breaker.closed_at is not None:
        failures = failures.filter(at__lte=breaker.closed_at)
    return visible_tasks(user).filter(pk__in=failures.values("task")).select_related("agent").order_by("-id")
