"""Reads of tasks with their recovery state, for pages and the API. Query counts do not grow with data."""

from django.db.models import Exists, F, OuterRef, Prefetch, Q, Subquery

from recovery.classify import Diagnosis, RunFacts, StepFacts, classify
from recovery.models import LIVE_ACTION_STATUSES, ActionStatus, RecoveryAction, RecoveryAttempt
from tasks.errors import NotFound
from tasks.models import Message, Run, Step, Task
from tasks.selectors import visible_runs, visible_tasks

CLOSED = ("done", "cancelled")


def _latest_run(field: str = "pk"):
    return Subquery(Run.objects.filter(task=OuterRef("pk")).order_by("-id").values(field)[:1])


def annotate_state(qs):
    live = RecoveryAction.objects.filter(task=OuterRef("pk"))
    return qs.annotate(
        has_exhausted=Exists(live.filter(status=ActionStatus.EXHAUSTED)),
        has_open=Exists(live.filter(status=ActionStatus.OPEN)),
        current_run_id=_latest_run(),
        current_run_status=_latest_run("status"),
    )


def state_filter(qs, state: str):
    """The SQL twin of presenters.task_state; keep the two in the same order."""
    if state == "all":
        return qs
    if state in CLOSED:
        return qs.filter(status=state)
    qs = qs.exclude(status__in=CLOSED)
    if state == "exhausted":
        return qs.filter(has_exhausted=True)
    qs = qs.filter(has_exhausted=False)
    if state == "needs_decision":
        return qs.filter(has_open=True)
    qs = qs.filter(has_open=False)
    running = Q(current_run_status__in=("running", "stopping"))
    if state == "running":
        return qs.filter(running)
    qs = qs.exclude(running)
    held = Q(paused=True) | Q(status="blocked") | Q(budget_limit__isnull=False, budget_used__gte=F("budget_limit"))
    if state == "blocked":
        return qs.filter(held)
    qs = qs.exclude(held)
    if state == "queued":
        return qs.filter(current_run_status="queued")
    return qs.exclude(current_run_status="queued")


def _action_prefetch(live_only: bool):
    qs = RecoveryAction.objects.select_related("original_owner", "run").prefetch_related(
        Prefetch("attempt_history", queryset=RecoveryAttempt.objects.order_by("number")),
        "repairs__requested_by",
    )
    if live_only:
        qs = qs.filter(status__in=LIVE_ACTION_STATUSES)
    return Prefetch("actions", queryset=qs.order_by("-id"), to_attr="action_list")


def _attach_current_runs(tasks: list[Task]) -> None:
    ids = [t.current_run_id for t in tasks if getattr(t, "current_run_id", None)]
    runs = {r.pk: r for r in Run.objects.filter(pk__in=ids)}
    for t in tasks:
        t.current_run = runs.get(getattr(t, "current_run_id", None))


def task_page(user, *, state: str = "all", q: str = "", cursor: int | None = None, limit: int = 50):
    """One page of visible tasks, newest first (keyset on id). Returns (tasks, next_cursor)."""
    qs = annotate_state(visible_tasks(user)).select_related("agent")
    qs = state_filter(qs, state)
    if q:
        q = q.strip()
        qs = qs.filter(Q(title__icontains=q) | Q(pk=int(q)) if q.isdigit() else Q(title__icontains=q))
    if cursor is not None:
        qs = qs.filter(pk__lt=cursor)
    tasks = list(qs.order_by("-id").prefetch_related(_action_prefetch(live_only=True))[: limit + 1])
    more = len(tasks) > limit
    tasks = tasks[:limit]
    _attach_current_runs(tasks)
    return tasks, (tasks[-1].pk if more and tasks else None)


def task_detail(user, task_id: int) -> Task:
    task = (
        annotate_state(visible_tasks(user))
        .select_related("agent", "org", "creator")
        .prefetch_related(
            _action_prefetch(live_only=False),
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
    _attach_current_runs([task])
    return task


def run_detail(user, run_id: int) -> Run:
    run = (
        visible_runs(user)
        .select_related("task", "agent", "continued_by")
        .prefetch_related(Prefetch("steps", queryset=Step.objects.order_by("seq"), to_attr="step_list"))
        .filter(pk=run_id)
        .first()
    )
    if run is None:
        raise NotFound(f"No run #{run_id}.")
    return run


# --- diagnosis ---------------------------------------------------------------


def chain_of(run: Run) -> list[int]:
    """Run ids of the chain ending at `run`, oldest first (bounded by the chain limit)."""
    ids = [run.pk]
    prev = run.continues_id
    while prev is not None and len(ids) < 64:
        ids.append(prev)
        prev = Run.objects.filter(pk=prev).values_list("continues_id", flat=True).first()
    return list(reversed(ids))


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


def run_facts(run: Run, steps: list[Step] | None = None) -> RunFacts:
    if steps is None:
        steps = getattr(run, "step_list", None)
        if steps is None:
            steps = list(run.steps.order_by("seq"))
    chain = chain_of(run)
    earlier: dict[int, int] = {}
    if len(chain) > 1:
        for seq in Step.objects.filter(run_id__in=chain[:-1], phase="dispatched", parent_seq__isnull=True).values_list(
            "seq", flat=True
        ):
            earlier[seq] = earlier.get(seq, 0) + 1
    return RunFacts(
        run_id=run.pk,
        status=run.status,
        plan=run.input,
        steps=tuple(step_facts(s) for s in steps),
        chain_length=len(chain),
        earlier_interruptions=earlier,
        recovery_disabled=run.recovery_disabled,
    )


def diagnose(run: Run, steps: list[Step] | None = None) -> Diagnosis:
    return classify(run_facts(run, steps))


def action_detail(user, action_id: int) -> RecoveryAction | None:
    return (
        RecoveryAction.objects.filter(pk=action_id, task__in=visible_tasks(user))
        .select_related("original_owner", "run", "task__agent")
        .prefetch_related(
            Prefetch("attempt_history", queryset=RecoveryAttempt.objects.order_by("number")),
            "repairs__requested_by",
        )
        .first()
    )
