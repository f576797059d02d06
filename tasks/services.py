"""State changes of the execution domain. Each is one transaction and appends its events.

Runner writes are fenced: they name the run and the lease epoch they hold, and
are refused with `StaleLease` (changing nothing) when the epoch is old, the
lease lapsed, or the run is held by another worker identity.
"""

import json
import posixpath
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, F, Max, OuterRef, Q, Subquery
from django.utils import timezone

from tasks import checkpoints, lifecycle, payloads, worker_workspaces
from tasks.authz import require_role
from tasks.errors import (
    IdempotencyConflict,
    Invalid,
    NotEligible,
    NotFound,
    PayloadTooLarge,
    SeqConflict,
    ServiceError,
    StaleLease,
)
from tasks.events import actor_name, event_append
from tasks.export_roots import destination_refusal
from tasks.holds import task_hold
from tasks.models import (
    LEASED_RUN_STATUSES,
    MAX_HANDOVERS_UNREAD,
    WORKSPACE_VALIDATION_FAILED,
    Agent,
    Message,
    MessageStatus,
    Organization,
    Run,
    RunKind,
    RunStatus,
    Step,
    StepPhase,
    Task,
    TaskStatus,
    Worker,
    WorkspaceReport,
)
from tasks.modes import MODEL, PLAN_ONLY_TOOLS, profile_mode
from tasks.selectors import task_facts, visible_tasks
from tasks.transitions import MESSAGES, RUNS, STEPS, TASKS, NewEvent, claim_queued_run
from tasks.worker_instances import instance_beat, instance_seen
from tasks.workspace import (
    UnsafePath,
    clean_relpath,
    make_fresh_dir,
    manifest_read_ahead,
    manifest_record,
    step_paths,
)

MAX_PLAN_STEPS = 10_000
# Integer bounds of what is stored (64-bit columns), so out-of-range input is a 400, never a database error.
MAX_SEQ = 2**62  # nested steps are numbered parent_seq * 100000 + position
MAX_USAGE = 2**31 - 1  # one step's usage; the task's budget_used (their sum) is 64-bit
BUDGET_MAX = 2**62


def payload_size(value) -> int:
    return len(json.dumps(value, separators=(",", ":"), default=str).encode())


def _check_payload(value, what: str) -> None:
    if payload_size(value) > settings.CONSOLE_MAX_PAYLOAD:
        raise PayloadTooLarge(f"The {what} is larger than 8 MiB; nothing was saved.")


def _stored(value, what: str):
    """`value` in the form it is saved in (tasks.payloads: NUL, lone surrogates and bytes tagged), size-checked."""
    try:
        value = payloads.canonical(value)
    except payloads.PayloadError as exc:
        raise Invalid(f"The {what} cannot be saved: {exc}.") from None
    _check_payload(value, what)
    return value


def _canonical(value) -> str:
    """One spelling of a stored value, to tell two outcomes apart exactly (`true` is not `1`, `1.0` not `1`)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _fast_stored(value):
    """The stored form of `value` when it may be saved as it is (in bounds), else None: the general path decides."""
    try:
        value = payloads.canonical(value)
    except payloads.PayloadError:
        return None
    return value if payload_size(value) <= settings.CONSOLE_MAX_PAYLOAD else None


def lease_delta() -> timedelta:
    return timedelta(seconds=settings.CONSOLE_LEASE_SECONDS)


# --- tasks -----------------------------------------------------------------


MAX_PROMPT = 1_000_000  # characters of an agent prompt


def input_kind(input) -> str:
    """Pure: `agent` for an agent prompt (`{"prompt": ...}`), else `plan`. Validated by `validate_input`."""
    return RunKind.AGENT if isinstance(input, dict) and "prompt" in input else RunKind.PLAN


def validate_input(input) -> str:
    """A run's input is a plan (`{"steps": [...]}`) or an agent prompt (`{"prompt": "<text>", ...}`, other keys
    kept for the agent); never both. Returns its kind."""
    if isinstance(input, dict) and "prompt" in input:
        prompt = input["prompt"]
        if "steps" in input:
            raise Invalid("`input` is a plan (`steps`) or an agent prompt (`prompt`), not both.", field="input")
        if not isinstance(prompt, str) or not prompt.strip():
            raise Invalid("An agent prompt (`input.prompt`) must be non-empty text.", field="input")
        if len(prompt) > MAX_PROMPT:
            raise Invalid(f"An agent prompt holds at most {MAX_PROMPT:,} characters.", field="input")
        return RunKind.AGENT
    validate_plan(input)
    return RunKind.PLAN


def validate_plan(plan) -> list[dict]:
    """A plan is `{"steps": [{"tool": str, "args": {...}}, ...]}`; return its steps."""
    if not isinstance(plan, dict) or not isinstance(plan.get("steps"), list):
        raise Invalid(
            "`input` must be an object with a list `steps` (a plan) or a text `prompt` (an agent prompt).",
            field="input",
        )
    steps = plan["steps"]
    if len(steps) > MAX_PLAN_STEPS:
        raise Invalid(f"A plan holds at most {MAX_PLAN_STEPS} steps.", field="input")
    for i, step in enumerate(steps, start=1):
        if not isinstance(step, dict) or not isinstance(step.get("tool"), str) or not step["tool"]:
            raise Invalid(f"Step {i} needs a `tool` name.", field="input")
        if not payloads.is_object(step.get("args", {})):
            raise Invalid(f"Step {i}: `args` must be an object.", field="input")
    return steps


def workspace_path(task: Task) -> Path:
    return Path(settings.CONSOLE_WORKSPACES).resolve() / task.org.slug / f"task-{task.pk}"


@transaction.atomic
def task_create(
    *,
    org: Organization,
    actor,
    title: str,
    agent: str,
    input: dict,
    parent: int | None = None,
    budget_limit: int | None = None,
    private: bool = False,
    export_destination: str = "",
    creator=None,
) -> Task:
    """Create a task with its workspace directory and queue its first run."""
    title = (title or "").strip()
    if not title:
        raise Invalid("A task needs a title.", field="title")
    input = _stored(input, "task input")
    validate_input(input)
    agent_obj = Agent.objects.filter(org=org, name=agent).first()
    if agent_obj is None:
        raise Invalid(f"No agent named {agent!r} in this organization.", field="agent")
    parent_obj = None
    if parent is not None:
        # Resolved under the caller's visibility: another person's private task is "no such task", like a missing one.
        candidates = Task.objects.filter(org=org)
        if not isinstance(actor, str | Worker) and actor is not None:
            candidates = visible_tasks(actor).filter(org=org)
        parent_obj = candidates.filter(pk=parent).first()
        if parent_obj is None:
            raise NotFound(f"No task #{parent}.", field="parent")
    if budget_limit is not None and (not isinstance(budget_limit, int) or not 0 <= budget_limit <= BUDGET_MAX):
        raise Invalid(f"`budget_limit` must be an integer from 0 to {BUDGET_MAX}.", field="budget_limit")
    if export_destination and (refusal := destination_refusal(org.pk, export_destination, exporting=False)):
        raise Invalid(refusal[1], field="export_destination", reason=refusal[0])
    task = Task.objects.create(
        org=org,
        title=title[:300],
        parent=parent_obj,
        agent=agent_obj,
        creator=creator,
        budget_limit=budget_limit,
        private=bool(private),
        export_destination=export_destination or "",
    )
    # A leftover directory of the same name (an earlier database) is never reused, nor deleted.
    path = make_fresh_dir(workspace_path(task).parent, workspace_path(task).name)
    Task.objects.filter(pk=task.pk).update(workspace=str(path))
    task.workspace = str(path)
    event_append(org_id=org.pk, task_id=task.pk, kind="task_created", actor=actor, payload={"title": task.title})
    run_enqueue(task=task, actor=actor, input=input)
    return task


def run_enqueue(
    *, task: Task, actor, input: dict, continues: Run | None = None, payload: dict | None = None, carry=None
) -> Run:
    """Queue a run of `task`. Refused (`NotEligible`) while another run of it is live.

    Callers hold the transaction; the partial unique index `run_one_live_per_task`
    settles races between two enqueuers.
    """
    if Run.objects.filter(task=task, status__in=(RunStatus.QUEUED, *LEASED_RUN_STATUSES)).exists():
        raise NotEligible(f"Task #{task.pk} already has a live run.")
    run = Run.objects.create(
        org_id=task.org_id,
        task=task,
        agent_id=task.agent_id,
        continues=continues,
        attempt=(continues.attempt + 1) if continues else 1,
        # A continuation keeps its chain's place in the queue; a first run (or a fresh start) joins at the end.
        queued_since=continues.queued_since if continues else timezone.now(),
        input=input,
        kind=input_kind(input),
        carry=carry or {},
    )
    if continues is not None:
        task_status_follows(task.pk, TaskStatus.IN_PROGRESS)
    event_append(
        org_id=task.org_id,
        task_id=task.pk,
        run_id=run.pk,
        kind="run_queued",
        actor=actor,
        payload={"attempt": run.attempt, "continues": continues.pk if continues else None, **(payload or {})},
    )
    return run


def task_status_follows(task_id: int, status: str) -> None:
    """Move an open task's status after its runs (a closed task stays closed), and mark it changed.

    The caller's own event records why (a claim, a finish); the board orders by `updated_at`.
    """
    now = timezone.now()
    if not TASKS.move(task_id, status, expect=_open_sources(status), strict=False, updated_at=now):
        Task.objects.filter(pk=task_id).update(updated_at=now)


def _open_sources(status: str) -> tuple[str, ...]:
    return tuple(s for s in TASKS.sources(status) if s in (TaskStatus.TODO, TaskStatus.IN_PROGRESS, TaskStatus.BLOCKED))


def _task_status_after(run: Run) -> str:
    if run.status == RunStatus.SUCCEEDED:
        # A follow-up that waits is work the task still owes: its next run carries it, so it is not done yet.
        if Message.objects.filter(task_id=run.task_id, status=MessageStatus.WAITING).exists():
            return TaskStatus.IN_PROGRESS
        return TaskStatus.DONE
    if run.status in LEASED_RUN_STATUSES or run.status == RunStatus.QUEUED:
        return TaskStatus.IN_PROGRESS
    return TaskStatus.BLOCKED


# --- the runner side -------------------------------------------------------


def run_claim(*, worker: Worker, label: str, agents=None, kinds=None, workspaces=None) -> Run | None:
    """Lease the queued run of the worker's organization that has waited longest, whose task is not held.

    A run's place in the queue is its chain's (`queued_since`): a continuation is claimed before work
    queued after its chain began. On PostgreSQL the claim is one prepared statement (tasks.transitions
    `claim_queued_run`) taking rows with `FOR UPDATE SKIP LOCKED` from the partial index of queued
    runs, so concurrent claimers never wait for each other and never take the same run; outside a
    caller's transaction it runs alone, a transaction of its own (one round trip: no BEGIN, no COMMIT).
    On SQLite the IMMEDIATE transaction serializes claimers. The claim, its event and the instance's
    bookkeeping (at most once a second, `worker_instances.poll_due`) are one transaction. Returns None
    when nothing is admissible.

    `agents` (names) and `kinds` (`plan`, `agent`) narrow what this worker takes; None takes any.
    `workspaces` (`{"label", "root"}`) says the worker holds its tasks' workspaces on its own disk: it takes
    only tasks no other label holds, and the task it claims is held by that label from then on
    (tasks.worker_workspaces).
    """
    label = (label or "").strip()[:100] or worker.name
    held = _held_label(workspaces)
    only = _ClaimFilter(
        agents=None if agents is None else list(agents),
        kinds=None if kinds is None else list(kinds),
        held=held[0] if held else "",
    )
    run = None
    if connection.vendor == "postgresql" and not connection.in_atomic_block:
        # The statement alone is a transaction of its own: no BEGIN and COMMIT round trips around it. What it
        # claims continues nothing, so no started-listener has anything to settle (tasks.lifecycle).
        run, candidate = _claim_statement(worker, label, only, skipped=[], alone=True)
        if run is None and candidate is None:
            return None
    if run is None:
        # SQLite; a caller's transaction; or a candidate for the machine (a child task, a continuation, follow-ups
        # to hand over), claimed in a transaction, where the statement's lock holds.
        with transaction.atomic():
            if connection.vendor == "postgresql":
                run = _claim_in_one_statement(worker, label, only)
            else:
                run = _claim(worker, label, only)
                instance_seen(worker=worker, label=label, claimed=run is not None)
    if run is not None and held:
        _hold_workspace(run, *held)
    elif run is not None and run.continues_id is None:
        _record_baseline(run)
    return run


@dataclass(frozen=True)
class _ClaimFilter:
    agents: list[str] | None = None
    kinds: list[str] | None = None
    held: str = ""


def _held_label(workspaces) -> tuple[str, str] | None:
    """The claim's `workspaces` as (label, root), or None when the worker holds no workspaces."""
    if workspaces is None:
        return None
    label = workspaces.get("label") if isinstance(workspaces, dict) else None
    root = workspaces.get("root") if isinstance(workspaces, dict) else None
    if not isinstance(label, str) or not label.strip() or len(label) > 100:
        raise Invalid("`workspaces.label` must be the label of the workspaces the worker holds (1-100 chars).",
                      field="workspaces.label")  # fmt: skip
    if not isinstance(root, str) or not root.startswith("/") or len(root) > 600:
        raise Invalid(
            "`workspaces.root` must be the worker's absolute path of its workspaces.", field="workspaces.root"
        )
    return label.strip(), root


def workspace_key_of(task: Task) -> str:
    """Where the task's workspace lies under a worker's root: `<org>/<the name of the server's directory for it>`
    (`task-<id>`, or the fresh name it was given), until a reissue moves it. A local worker whose root is the
    server's CONSOLE_WORKSPACES (`make run`) so works in the very directory the task was created with."""
    if task.workspace_key:
        return task.workspace_key
    return f"{task.org.slug}/{posixpath.basename(task.workspace) if task.workspace else f'task-{task.pk}'}"


def _hold_workspace(run: Run, label: str, root: str) -> None:
    """The claimed run's task is held by the claimer's label, at its path there (one UPDATE when it moved)."""
    task = run.task
    key = workspace_key_of(task)
    path = posixpath.join(root, key)
    if (task.workspace_label, task.workspace_key, task.workspace_root) != (label, key, path):
        Task.objects.filter(pk=task.pk).update(workspace_label=label, workspace_key=key, workspace_root=path)
        task.workspace_label, task.workspace_key, task.workspace_root = label, key, path


def _record_baseline(run: Run) -> None:
    """A chain starts (a first run, a fresh start): what the workspace holds now is its baseline, e.g. inputs a
    person put there; later differences are then real ones. Read after the claim committed (the worker has not
    been told of its claim yet, so nothing writes there), recorded in a transaction of its own."""
    task = run.task  # as the claim returned it, with its organization: no read of its own
    if not task.workspace:
        return
    try:
        disk = manifest_read_ahead(task=task, scan_all=True)
        with transaction.atomic():
            manifest_record(task=task, scan_all=True, source="baseline", disk=disk)
    except OSError:
        # An unreadable workspace records no baseline: validation then lists what is there as added.
        pass


def _claim_statement(worker: Worker, label: str, only: _ClaimFilter, *, skipped: list[int], alone: bool = False):
    now = timezone.now()
    return claim_queued_run(
        org_id=worker.org_id,
        worker=worker,
        label=label,
        owner=f"{worker.name}/{label}"[:200],
        actor=actor_name(worker),
        now=now,
        expires=now + lease_delta(),
        skipped=skipped,
        agents=only.agents,
        kinds=only.kinds,
        held=only.held,
        alone=alone,
    )


def _claim_in_one_statement(worker: Worker, label: str, only: _ClaimFilter) -> Run | None:
    skipped: list[int] = []
    for _ in range(20):
        run, candidate = _claim_statement(worker, label, only, skipped=skipped)
        if run is not None:
            _claimed(run)
            return run
        if candidate is None:
            return None
        # A child task or a continuation: locked by the statement, claimed here through the machine.
        run = Run.objects.select_related("task__org", "agent").get(pk=candidate)
        if _take(run, worker, label):
            instance_seen(worker=worker, label=label, claimed=True)
            return run
        skipped.append(run.pk)
    return None


def _claim_candidates(worker: Worker, skipped: list[int], only: _ClaimFilter):
    open_dependency = Task.dependencies.through.objects.filter(from_task_id=OuterRef("task_id")).exclude(
        to_task__status=TaskStatus.DONE
    )
    qs = (
        Run.objects.filter(org_id=worker.org_id, status=RunStatus.QUEUED)
        .filter(task__paused=False)
        .exclude(task__status__in=(TaskStatus.DONE, TaskStatus.CANCELLED))
        .filter(Q(task__budget_limit__isnull=True) | Q(task__budget_used__lt=F("task__budget_limit")))
        .exclude(Exists(open_dependency))
        .order_by("queued_since", "id")
    )
    if skipped:
        qs = qs.exclude(pk__in=skipped)
    if only.kinds is not None:
        qs = qs.filter(kind__in=only.kinds)
    if only.agents is not None:
        qs = qs.filter(agent__name__in=only.agents)
    qs = qs.filter(Q(task__workspace_label="") | Q(task__workspace_label=only.held))
    if connection.features.has_select_for_update_skip_locked:
        qs = qs.select_for_update(skip_locked=True, of=("self",))
    return qs.select_related("task__org", "agent")


def _claim(worker: Worker, label: str, only: _ClaimFilter) -> Run | None:
    skipped: list[int] = []
    for _ in range(20):
        run = _claim_candidates(worker, skipped, only).first()
        if run is None:
            return None
        if _take(run, worker, label):
            return run
        skipped.append(run.pk)
    return None


def _take(run: Run, worker: Worker, label: str) -> bool:
    """Claim the locked candidate `run` through the machine; False if a hold or a change refuses it."""
    # Everything but an ancestor's pause is filtered in SQL; only a child task has ancestors to ask.
    if run.task.parent_id is not None and task_hold(task_facts(run.task)) is not None:
        return False
    now = timezone.now()
    # The row is locked (on SQLite the IMMEDIATE transaction holds the database), so the epoch read
    # is the current one and this compare-and-set cannot miss; `obj` takes the written fields.
    if not RUNS.move(
        run.pk,
        RunStatus.RUNNING,
        strict=False,
        obj=run,
        lease_worker=worker,
        lease_owner=f"{worker.name}/{label}"[:200],
        lease_epoch=run.lease_epoch + 1,
        lease_expires_at=now + lease_delta(),
        started_at=now,
    ):
        return False
    _task_follows_claim(run.task, now)
    delivered = messages_hand_over(run)
    event_append(
        org_id=run.org_id,
        task_id=run.task_id,
        run_id=run.pk,
        kind="run_claimed",
        actor=worker,
        payload={
            "epoch": run.lease_epoch,
            "owner": run.lease_owner,
            "attempt": run.attempt,
            "continues": run.continues_id,
            "messages_delivered": sorted(delivered),
        },
    )
    _claimed(run)
    return True


def messages_hand_over(run: Run) -> list[int]:
    """Follow-ups reach the agent with the claim of the task's next run, inside the claim's transaction.

    The ones admitted into this run, and every one still waiting on the task (written while another run
    worked, or returned by a run that ended without reading it): whatever run of the task starts next
    carries them, a first run and a fresh start included. They are `delivered` (handed over) now and
    `read` only once the run acknowledges them.
    """
    # One live run per task: every follow-up admitted on the task was admitted into this run.
    return sorted(
        MESSAGES.move_all(
            Message.objects.filter(task_id=run.task_id),
            MessageStatus.DELIVERED,
            expect=(MessageStatus.ADMITTED, MessageStatus.WAITING),
            run=run,
            waiting_reason="",
            handovers=F("handovers") + 1,
        )
    )


def _claimed(run: Run) -> None:
    """What follows every claim, in its transaction: the listeners. (The workspace baseline of a chain's first
    run is recorded after the claim's transaction: `_record_baseline`.) A continuation whose workspace a worker
    holds has not started yet: the worker compares its workspace first, and its report starts it or refuses it
    (`workspace_reported`)."""
    if awaits_validation(run):
        return
    lifecycle.run_started(run)


def awaits_validation(run: Run) -> bool:
    """A continuation the worker holding its workspace must validate before it runs anything."""
    return bool((run.carry or {}).get("validate")) and not (run.carry or {}).get("validated")


def _task_follows_claim(task: Task, now) -> None:
    """The claimed run's task is in progress now: one UPDATE (the task as the claim read it says which)."""
    if task.status != TaskStatus.IN_PROGRESS and TASKS.move(
        task.pk,
        TaskStatus.IN_PROGRESS,
        expect=_open_sources(TaskStatus.IN_PROGRESS),
        strict=False,
        obj=task,
        updated_at=now,
    ):
        return
    Task.objects.filter(pk=task.pk).update(updated_at=now)
    task.updated_at = now


def _held_run(
    *, worker: Worker, run_id: int, epoch, profile: bool = False, seq: int | None = None, plan: bool = False
) -> Run:
    """Lock and return the run if `worker` holds its lease at `epoch`, else StaleLease.

    With `profile` the agent's profile comes along; with `seq` the run carries `saved_step_id`, the id of
    its step `seq` if one is saved (all in the one locking statement).
    """
    if not _is_id(run_id):
        raise StaleLease(f"This worker does not hold run #{run_id}.")  # no such run: it cannot be held
    # A runner write never needs the run's plan (it can be large): it is not read with the lock.
    qs = Run.objects.select_for_update(of=("self",)).filter(pk=run_id)
    if not plan:
        qs = qs.defer("input")
    if profile:
        qs = qs.select_related("agent__profile")
    if seq is not None:
        qs = qs.annotate(saved_step_id=Subquery(Step.objects.filter(run_id=OuterRef("pk"), seq=seq).values("pk")[:1]))
    return _check_held(qs.first(), worker=worker, run_id=run_id, epoch=epoch)


def _is_id(value) -> bool:
    """A value a 64-bit id column can hold (a larger one names no row; the database would refuse the lookup)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**63


def _check_held(run: Run | None, *, worker: Worker, run_id: int, epoch) -> Run:
    if run is None or run.org_id != worker.org_id or run.lease_worker_id != worker.pk:
        raise StaleLease(f"This worker does not hold run #{run_id}.")
    if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch != run.lease_epoch:
        raise StaleLease(f"Lease epoch {epoch!r} is not the current epoch of run #{run_id}.")
    if run.status not in LEASED_RUN_STATUSES:
        raise StaleLease(f"Run #{run_id} is {run.status}; its lease is over.")
    if run.lease_expires_at is None or run.lease_expires_at <= timezone.now():
        raise StaleLease(f"The lease on run #{run_id} lapsed at {run.lease_expires_at:%Y-%m-%d %H:%M:%S}.")
    return run


def _held_step(*, worker: Worker, run_id: int, epoch, seq, related: tuple[str, ...] = ()) -> Step:
    """Lock step `seq` and its run in one statement; the run must be held by `worker` at `epoch`.

    StaleLease first (as for every runner write), then NotFound for a step that is not saved.
    """
    step = (
        Step.objects.select_for_update(of=("self", "run"))
        .select_related("run", *related)
        .defer("run__input")
        .filter(run_id=run_id, seq=seq)
        .first()
        if _is_id(run_id) and isinstance(seq, int) and not isinstance(seq, bool) and 1 <= seq <= MAX_SEQ
        else None
    )
    if step is None:
        run = _held_run(worker=worker, run_id=run_id, epoch=epoch)
        raise NotFound(f"Run #{run.pk} has no step {seq}.")
    _check_held(step.run, worker=worker, run_id=run_id, epoch=epoch)
    return step


MAX_ACK_IDS = 1_000


@transaction.atomic
def messages_ack(*, worker: Worker, run_id: int, epoch, ids) -> list[int]:
    """The run acknowledges the follow-ups it was handed: each becomes `read` (with `read_at`), once.

    Fenced by the lease like every runner write. Returns the ids of the run's messages that are read,
    in the order they were written: a repeated acknowledgement returns the same ids and changes nothing.
    An id that is not a follow-up handed to this run is left out (another run's, another task's, unknown).
    """
    run = _held_run(worker=worker, run_id=run_id, epoch=epoch)
    if not isinstance(ids, list) or len(ids) > MAX_ACK_IDS or not all(_is_id(i) for i in ids):
        raise Invalid(f"`ids` must be a list of at most {MAX_ACK_IDS} message ids.", field="ids")
    mine = Message.objects.filter(run=run, pk__in=set(ids))
    now = timezone.now()
    read = MESSAGES.move_all(mine, MessageStatus.READ, expect=MessageStatus.DELIVERED, read_at=now, waiting_reason="")
    if read:
        event_append(
            org_id=run.org_id,
            task_id=run.task_id,
            run_id=run.pk,
            kind="messages_read",
            actor=worker,
            payload={"messages": sorted(read)},
        )
    return list(mine.filter(status=MessageStatus.READ).order_by("created_at", "id").values_list("pk", flat=True))


@transaction.atomic
def run_heartbeat(*, worker: Worker, run_id: int, epoch: int) -> Run:
    """Renew the lease of a running or stopping run. Renewal is bookkeeping, not an event."""
    run = _held_run(worker=worker, run_id=run_id, epoch=epoch)
    now = timezone.now()
    run.lease_expires_at = now + lease_delta()
    Run.objects.filter(pk=run.pk).update(lease_expires_at=run.lease_expires_at, last_heartbeat_at=now)
    instance_beat(worker=worker, lease_owner=run.lease_owner, now=now)
    return run


def step_plan(*, worker: Worker, run_id: int, epoch: int, seq, tool, args, parent_seq=None) -> Step:
    """Record that the run intends to call `tool` as step `seq`; resolves its recovery mode.

    Repeating the same plan returns the saved step; a different plan for a taken
    `seq` is refused. A top-level step of a plan run is one statement on PostgreSQL (tasks.checkpoints).
    An agent run numbers its top-level steps as it goes (`_agent_seq`).
    """
    # The fast road takes only what the general path would save as it is: the stored (wire) form of the
    # arguments, in bounds. Anything else goes the general path, which checks the lease first, then says why.
    stored = _fast_stored(args if args is not None else {})
    if (
        checkpoints.available()
        and parent_seq is None
        and tool not in ("subagent", MODEL)
        and isinstance(seq, int)
        and not isinstance(seq, bool)
        and 1 <= seq <= MAX_SEQ
        and isinstance(tool, str)
        and tool
        and stored is not None
        and payloads.is_object(stored)
    ):
        step = checkpoints.plan(
            worker=worker, run_id=run_id, epoch=epoch, seq=seq, tool=tool, args=stored, now=timezone.now()
        )
        if step is not None:
            return step
    return _step_plan(worker=worker, run_id=run_id, epoch=epoch, seq=seq, tool=tool, args=args, parent_seq=parent_seq)


MAX_BATCH = 64  # the steps one plan call may hold: one model turn's tool calls


@transaction.atomic
def step_plan_batch(*, worker: Worker, run_id: int, epoch: int, steps) -> list[Step]:
    """Plan several steps at once (one model turn's calls), in order, in one transaction: all or nothing.

    Each is planned as `step_plan` plans it alone (numbering, idempotent repeats, refusals); the first
    refusal refuses the whole batch and nothing of it is saved.
    """
    _held_run(worker=worker, run_id=run_id, epoch=epoch)
    if not isinstance(steps, list) or not 1 <= len(steps) <= MAX_BATCH:
        raise Invalid(f"`steps` must list 1 to {MAX_BATCH} steps.", field="steps")
    planned = []
    for i, call in enumerate(steps, start=1):
        if not isinstance(call, dict):
            raise Invalid(f"Step {i} of the batch must be an object.", field="steps")
        try:
            planned.append(
                _step_plan(
                    worker=worker,
                    run_id=run_id,
                    epoch=epoch,
                    seq=call.get("seq"),
                    tool=call.get("tool"),
                    args=call.get("args"),
                    parent_seq=call.get("parent_seq"),
                )
            )
        except ServiceError as exc:
            exc.extra.setdefault("index", i - 1)
            exc.detail = (
                f"Step {i} of the batch (seq {call.get('seq')!r}): {exc.detail} Nothing of the batch was saved."
            )
            raise
    return planned


def _model_args(args: dict) -> None:
    """A model turn names its model and the digest of its request (API.md, Model turns)."""
    if not isinstance(args.get("model"), str) or not args["model"].strip():
        raise Invalid("A model turn's `args.model` names the model.", field="args.model")
    digest = args.get("digest")
    if not isinstance(digest, str) or len(digest) != 64 or any(ch not in "0123456789abcdef" for ch in digest):
        raise Invalid(
            "A model turn's `args.digest` is the sha256 of its canonical request, 64 lowercase hex digits.",
            field="args.digest",
        )


def _agent_seq(run: Run, seq: int) -> None:
    """An agent run's next top-level number is one more than the highest its chain planned (the steps this
    run holds, carried ones included, and those of the chain it did not carry: `carry["rerun"]`). A number
    the chain planned that this run does not hold (a turn cut off mid-call, a call never dispatched, one
    decided not performed) may be planned again, and so may the one after the highest this run holds.
    Anything else skips ahead.
    """
    carry = run.carry or {}
    top = Step.objects.filter(run=run, parent_seq__isnull=True).aggregate(m=Max("seq"))["m"] or 0
    dropped = [d.get("seq") for d in carry.get("dropped", []) if isinstance(d, dict) and not d.get("parent_seq")]
    held = max([top, *(d for d in dropped if isinstance(d, int))])
    again = {r.get("seq") for r in carry.get("rerun", []) if isinstance(r, dict) and isinstance(r.get("seq"), int)}
    expected = 1 + max([held, *again])
    if seq in (held + 1, expected) or seq in again:
        return
    if seq in dropped:
        raise SeqConflict(
            f"Step {seq} of run #{run.pk} was dropped by its recovery mode; a repeat is a new step: plan {expected}.",
            next_seq=expected,
        )
    raise SeqConflict(
        f"Run #{run.pk} plans its steps in order: the next is {expected}, and {seq} "
        f"{'skips ahead' if seq > expected else 'is not one this run may plan again'}.",
        next_seq=expected,
    )


@transaction.atomic
def _step_plan(*, worker: Worker, run_id: int, epoch: int, seq, tool, args, parent_seq=None) -> Step:
    if not isinstance(seq, int) or isinstance(seq, bool) or not 1 <= seq <= MAX_SEQ:
        _held_run(worker=worker, run_id=run_id, epoch=epoch)
        raise Invalid(f"`seq` must be an integer from 1 to {MAX_SEQ}.", field="seq")
    if parent_seq is not None and (not isinstance(parent_seq, int) or isinstance(parent_seq, bool)
                                   or not 1 <= parent_seq <= MAX_SEQ):  # fmt: skip
        _held_run(worker=worker, run_id=run_id, epoch=epoch)
        raise Invalid(f"`parent_seq` must be an integer from 1 to {MAX_SEQ}.", field="parent_seq")
    run = _held_run(worker=worker, run_id=run_id, epoch=epoch, profile=True, seq=seq)
    if not isinstance(tool, str) or not tool:
        raise Invalid("`tool` must be a tool name.", field="tool")
    if len(tool) > 100:
        raise Invalid("`tool` holds at most 100 characters.", field="tool")
    if args is None:
        args = {}
    args = _stored(args, "step arguments")
    if not payloads.is_object(args):
        raise Invalid("`args` must be an object.", field="args")
    agent_run = run.kind == RunKind.AGENT
    if agent_run and tool in PLAN_ONLY_TOOLS:
        raise Invalid(f"{tool} is a feature of scripted plans; an agent run calls its own tools.", field="tool")
    if tool == MODEL:
        _model_args(args)
    parent = None
    if parent_seq is not None:
        parent = Step.objects.filter(run=run, seq=parent_seq).first()
        if parent is None:
            raise Invalid(f"No parent step {parent_seq} in run #{run.pk}.", field="parent_seq")
    if run.saved_step_id is not None:
        existing = Step.objects.get(pk=run.saved_step_id)
        if existing.tool == tool and existing.args == args and existing.parent_seq == parent_seq:
            return existing
        if agent_run:
            raise SeqConflict(
                f"Step {seq} of run #{run.pk} is already planned as another call ({existing.tool}).",
                saved={"tool": existing.tool, "args": existing.args},
            )
        raise NotEligible(f"Step {seq} of run #{run.pk} is already planned as a different call.")
    if agent_run and parent_seq is None:
        _agent_seq(run, seq)
    profile = getattr(run.agent, "profile", None)
    if tool == "subagent" and parent is None:
        name = args.get("agent")
        if not isinstance(name, str) or not Agent.objects.filter(org_id=run.org_id, name=name).exists():
            raise Invalid(f"subagent names no agent of this organization: {name!r}.", field="args.agent")
    if parent is not None and parent.tool == "subagent":
        # A subagent's calls are its own: they take its profile's recovery modes.
        sub_agent = Agent.objects.filter(org_id=run.org_id, name=parent.args.get("agent")).first()
        profile = getattr(sub_agent, "profile", None) if sub_agent else profile
    step = Step.objects.create(
        run=run,
        seq=seq,
        parent=parent,
        parent_seq=parent_seq,
        tool=tool,
        args=args,
        recovery_mode=profile_mode(tool, profile),
        planned_at=timezone.now(),
    )
    event_append(
        org_id=run.org_id,
        task_id=run.task_id,
        run_id=run.pk,
        kind="step_planned",
        actor=worker,
        payload={"seq": seq, "tool": tool, "recovery_mode": step.recovery_mode},
    )
    return step


def step_plan_dispatch(*, worker: Worker, run_id: int, epoch: int, seq, tool, args, parent_seq=None) -> Step:
    """Plan step `seq` and dispatch it in one transaction (the runner's `"dispatch": true`: the worker calls the
    tool right after the answer). All or nothing: a refused dispatch (a stop requested) leaves no plan either,
    the state a worker that died before planning leaves."""
    with transaction.atomic():
        step = step_plan(
            worker=worker, run_id=run_id, epoch=epoch, seq=seq, tool=tool, args=args, parent_seq=parent_seq
        )
        return step_dispatch(worker=worker, run_id=run_id, epoch=epoch, seq=step.seq)


def step_dispatch(*, worker: Worker, run_id: int, epoch: int, seq: int) -> Step:
    """Durably record that step `seq` is about to run. The worker runs the tool only after this commits.

    Refused while a stop is requested (nothing new starts after Stop), and for a
    step that is not planned. One statement on PostgreSQL (tasks.checkpoints).
    """
    if checkpoints.available() and isinstance(seq, int) and not isinstance(seq, bool):
        step = checkpoints.dispatch(worker=worker, run_id=run_id, epoch=epoch, seq=seq, now=timezone.now())
        if step is not None:
            return step
    return _step_dispatch(worker=worker, run_id=run_id, epoch=epoch, seq=seq)


@transaction.atomic
def _step_dispatch(*, worker: Worker, run_id: int, epoch: int, seq: int) -> Step:
    step = _held_step(worker=worker, run_id=run_id, epoch=epoch, seq=seq)
    run = step.run
    if step.phase == StepPhase.DISPATCHED and step.dispatch_epoch == epoch:
        return step
    if step.phase != StepPhase.PLANNED:
        raise NotEligible(f"Step {seq} is {step.phase}; only a planned step can be dispatched.")
    if run.status == RunStatus.STOPPING:
        raise NotEligible(f"Run #{run.pk} was asked to stop; step {seq} was not dispatched.", reason="stop_requested")
    now = timezone.now()
    # Step and run are locked: the compare-and-set guards a programming error, not a race.
    if not STEPS.move(step.pk, StepPhase.DISPATCHED, strict=False, obj=step, dispatched_at=now, dispatch_epoch=epoch):
        raise NotEligible(f"Step {seq} changed while being dispatched.")
    event_append(
        org_id=run.org_id,
        task_id=run.task_id,
        run_id=run.pk,
        kind="step_dispatched",
        actor=worker,
        payload={"seq": seq, "tool": step.tool},
    )
    return step


def usage_units(usage) -> tuple[int, dict | None]:
    """A completion's `usage`: an integer (units), or a model turn's `{"input_tokens", "output_tokens",
    "cost"?}` (its units are the tokens in and out). Returns (units, the token counts kept with the step).
    None is 1 unit. Invalid otherwise."""
    if usage is None:
        return 1, None
    if isinstance(usage, int) and not isinstance(usage, bool):
        if not 0 <= usage <= MAX_USAGE:
            raise Invalid(f"`usage` must be an integer from 0 to {MAX_USAGE}.", field="usage")
        return usage, None
    if isinstance(usage, dict):
        detail = {}
        for key in ("input_tokens", "output_tokens"):
            value = usage.get(key, 0)
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_USAGE:
                raise Invalid(f"`usage.{key}` must be an integer from 0 to {MAX_USAGE}.", field="usage")
            detail[key] = value
        cost = usage.get("cost")
        if cost is not None:
            if not isinstance(cost, int | float) or isinstance(cost, bool) or not 0 <= cost <= 1e12:
                raise Invalid("`usage.cost` must be a number from 0 up.", field="usage")
            detail["cost"] = cost
        units = detail["input_tokens"] + detail["output_tokens"]
        if units > MAX_USAGE:
            raise Invalid(f"A step's tokens in and out add up to at most {MAX_USAGE}.", field="usage")
        return units, detail
    raise Invalid("`usage` must be an integer or {input_tokens, output_tokens, cost?}.", field="usage")


def step_complete(
    *,
    worker: Worker,
    run_id: int,
    epoch: int,
    seq: int,
    ok: bool,
    result=None,
    error: str = "",
    usage=None,
    result_too_large: bool = False,
    files=None,
    workspace=None,
) -> tuple[Step, bool]:
    """Record the outcome of a dispatched step; returns it and whether the run should stop.

    See `_step_complete`. A step that changes no workspace file, of a task without a budget limit,
    is one statement on PostgreSQL (tasks.checkpoints).
    """
    try:
        units, detail = usage_units(usage)
    except Invalid:
        units, detail = None, None  # the general path checks the lease first, then refuses it
    stored = _fast_stored(result)
    if (
        checkpoints.available()
        and isinstance(seq, int)
        and not isinstance(seq, bool)
        and isinstance(ok, bool)
        and not result_too_large
        and not files
        and workspace is None
        and units is not None
        and (stored is not None or result is None)
    ):
        done = checkpoints.complete(
            worker=worker,
            run_id=run_id,
            epoch=epoch,
            seq=seq,
            ok=ok,
            result=stored,
            error="" if error is None else payloads.readable(str(error))[:10_000],
            usage=units,
            usage_detail=detail,
            now=timezone.now(),
        )
        if done is not None:
            return done
    return _complete_after_reading(
        worker=worker,
        run_id=run_id,
        epoch=epoch,
        seq=seq,
        ok=ok,
        result=result,
        error=error,
        usage=usage,
        result_too_large=result_too_large,
        files=files,
        workspace=workspace,
        read_first=True,
    )


class _ReadFirst(Exception):
    """The step changes workspace files: its transaction stops before writing anything, so that the disk is
    read (and large files hashed) with no lock held; then the step completes in a transaction of its own."""

    def __init__(self, task: Task, paths: list[str], scan_all: bool):
        super().__init__()
        self.task, self.paths, self.scan_all = task, paths, scan_all


def _complete_after_reading(**kwargs) -> tuple[Step, bool]:
    try:
        return _step_complete(**kwargs)
    except _ReadFirst as first:
        kwargs["read_first"] = False
        kwargs["disk"] = manifest_read_ahead(task=first.task, paths=first.paths, scan_all=first.scan_all)
        return _step_complete(**kwargs)


@transaction.atomic
def _step_complete(
    *,
    worker: Worker,
    run_id: int,
    epoch: int,
    seq: int,
    ok: bool,
    result=None,
    error: str = "",
    usage=None,
    result_too_large: bool = False,
    files=None,
    workspace=None,
    disk=None,
    read_first: bool = False,
) -> tuple[Step, bool]:
    """Record the outcome of a dispatched step; returns it and whether the run should stop.

    The task's workspace manifest is updated in the same transaction, from what
    the server reads on disk: a completed `file_write` / `file_edit` records its
    file, `bash` (completed or failed) has the whole workspace walked, and
    `files` — workspace-relative paths the worker says the step changed — are
    recorded too (an unsafe path is refused before anything is saved). Their
    content is read before this transaction, never with the run locked: with
    `read_first` the transaction stops at `_ReadFirst` before writing anything,
    the disk is read, and the step completes with that reading (`disk`); here
    only `lstat`s are made. The outcome is recorded whatever the disk
    does: a file that could not be read or kept is recorded as not kept, with
    the reason, on the step (`workspace_notes`) and its manifest entry.

    `usage` (default 1) is added to the task's budget; reaching the limit asks
    the run to stop at this boundary. A result the worker could not send whole
    (`result_too_large`) completes the step without a saved result and disables
    recovery for the run, saying why; execution goes on.

    A worker that holds the task's workspace on its own disk sends what the step wrote instead (`workspace`:
    its entries, tasks.worker_workspaces); that is recorded, and the server reads no disk.
    """
    if not isinstance(ok, bool):
        _held_run(worker=worker, run_id=run_id, epoch=epoch)
        raise Invalid("`ok` must be true or false.", field="ok")
    step = _held_step(worker=worker, run_id=run_id, epoch=epoch, seq=seq, related=("run__task__org",))
    run, task = step.run, step.run.task
    reported = _reported_files(files)
    report = _worker_report(workspace)
    held = report is not None or worker_workspaces.held_by_worker(task)
    if held:
        reported = []  # the worker's entries say what the step wrote; its disk is not the server's to read
    phase = StepPhase.COMPLETED if ok else StepPhase.FAILED
    usage, usage_detail = usage_units(usage)
    result = _stored(result, "step result")
    error = "" if error is None else payloads.readable(str(error))[:10_000]
    outcome = {"phase": phase, "result": None if result_too_large else result, "error": error, "usage": usage}
    if step.phase in (StepPhase.COMPLETED, StepPhase.FAILED) and step.dispatch_epoch == epoch:
        # A repeat (a retry whose first answer was lost, without its Idempotency-Key): one outcome per step.
        if _canonical(outcome) == _canonical({name: getattr(step, name) for name in outcome}):
            return step, run.status == RunStatus.STOPPING
        raise IdempotencyConflict(
            f"Step {seq} was already {step.phase} with another outcome; the saved one stands and this one was "
            "not recorded.",
            seq=seq,
            phase=step.phase,
        )
    if step.phase != StepPhase.DISPATCHED:
        raise NotEligible(f"Step {seq} is {step.phase}; only a dispatched step can complete.")
    paths, scan_all = ([], False) if held else step_paths(step.tool, step.args)
    if read_first and (paths or scan_all or reported):
        raise _ReadFirst(task, [*(paths if ok else []), *reported], scan_all)
    now = timezone.now()
    done = {name: value for name, value in outcome.items() if name != "phase"}
    done.update(usage_detail=usage_detail, completed_at=now)
    # Step and run are locked: the compare-and-set guards a programming error, not a race.
    if not STEPS.move(step.pk, phase, expect=StepPhase.DISPATCHED, strict=False, obj=step, **done):
        raise NotEligible(f"Step {seq} changed while being completed.")
    if result_too_large and not run.recovery_disabled:
        run.recovery_disabled = f"The result of step {seq} exceeded 8 MiB and could not be checkpointed."
        Run.objects.filter(pk=run.pk).update(recovery_disabled=run.recovery_disabled)
        event_append(
            org_id=run.org_id,
            task_id=run.task_id,
            run_id=run.pk,
            kind="run_recovery_disabled",
            actor=worker,
            payload={"seq": seq, "reason": run.recovery_disabled},
        )
    if usage:
        # Only this run's steps add to the budget while it is the task's live run, and its lock is held:
        # the total read with the step is the one this adds to.
        Task.objects.filter(pk=task.pk).update(budget_used=F("budget_used") + usage, updated_at=now)
        task.budget_used += usage
    notes = None
    if report is not None:
        _record_reported(task, step, report, owner=run.lease_owner)
    if paths or scan_all or reported:
        notes = _record_files(task, step, paths=paths if ok else [], scan_all=scan_all, reported=reported, disk=disk)
        if notes:
            Step.objects.filter(pk=step.pk).update(workspace_notes=notes)
            step.workspace_notes = notes
    event_append(
        org_id=run.org_id,
        task_id=run.task_id,
        run_id=run.pk,
        kind="step_completed" if ok else "step_failed",
        actor=worker,
        payload={
            "seq": seq,
            "tool": step.tool,
            "usage": usage,
            **({"not_kept": notes.get("not_kept_count", 0)} if notes and notes.get("not_kept_count") else {}),
        },
    )
    if run.status == RunStatus.RUNNING and task.budget_exhausted:
        _request_stop(run, actor="system", reason="budget")
    return step, run.status == RunStatus.STOPPING


def _record_files(task: Task, step: Step, *, paths, scan_all: bool, reported, disk) -> dict:
    """The step's manifest update; its notes (files not kept and why, a walk cut short). A disk that cannot be
    read is a note too, never an error: the step's outcome is recorded either way."""
    try:
        with transaction.atomic():  # a savepoint: a failed update leaves the outcome to be recorded
            return manifest_record(
                task=task, step=step, paths=paths, scan_all=scan_all, forget_missing=reported, disk=disk
            ).notes()
    except OSError as exc:
        return {"error": f"{exc.strerror or exc}" + (f" ({exc.filename})" if getattr(exc, "filename", None) else "")}


MAX_REPORTED_FILES = 10_000


@dataclass(frozen=True)
class _Reported:
    entries: dict
    gone: list
    scan_all: bool
    complete: bool
    root: str
    label: str


def _worker_report(workspace) -> _Reported | None:
    """A completion's `workspace` (what the step wrote, read by the worker holding the workspace), checked
    whole before anything is saved."""
    if workspace is None:
        return None
    if not isinstance(workspace, dict):
        raise Invalid('`workspace` must be {"root", "label", "entries", "gone", "scan_all", "complete"}.',
                      field="workspace")  # fmt: skip
    root, label = workspace.get("root", ""), workspace.get("label", "")
    if not isinstance(root, str) or len(root) > 1000 or not isinstance(label, str) or len(label) > 100:
        raise Invalid("`workspace.root` and `workspace.label` must be text.", field="workspace")
    return _Reported(
        entries=worker_workspaces.clean_entries(workspace.get("entries"), "workspace.entries"),
        gone=worker_workspaces.clean_paths(workspace.get("gone"), "workspace.gone"),
        scan_all=workspace.get("scan_all") is True,
        complete=workspace.get("complete", True) is not False,
        root=root,
        label=label,
    )


def _record_reported(task: Task, step: Step, report: _Reported, *, owner: str) -> None:
    """The worker's entries of what the step wrote, into the manifest, and the report kept (who, where, when)."""
    worker_workspaces.manifest_apply(
        task=task,
        step=step,
        entries=report.entries,
        gone=report.gone,
        drop_unlisted=report.scan_all and report.complete,
    )
    WorkspaceReport.objects.create(
        task=task,
        run_id=step.run_id,
        kind="step",
        worker=owner,
        label=report.label,
        root=report.root,
        checked=len(report.entries) + len(report.gone),
        complete=report.complete,
    )
    if report.root and report.root != task.workspace_root:
        Task.objects.filter(pk=task.pk).update(workspace_root=report.root)
        task.workspace_root = report.root


def _reported_files(files) -> list[str]:
    """The worker's `files`: workspace-relative paths; anything else is refused (nothing is saved)."""
    if files is None:
        return []
    if not isinstance(files, list) or len(files) > MAX_REPORTED_FILES:
        raise Invalid(f"`files` must be a list of at most {MAX_REPORTED_FILES} workspace paths.", field="files")
    try:
        return list(dict.fromkeys(clean_relpath(f) for f in files))
    except UnsafePath as exc:
        raise Invalid(f"`files` holds a path that is not inside the workspace: {exc}", field="files") from exc


@transaction.atomic
def task_create_child(*, worker: Worker, run_id: int, epoch: int, title: str, input: dict, agent: str = "") -> Task:
    """The `task_create` tool: a run creates a child task of its own task (fenced by its lease).

    A feature of scripted plans: refused for an agent run (`not_eligible`, reason `plan_only`)."""
    run = _held_run(worker=worker, run_id=run_id, epoch=epoch)
    if run.kind == RunKind.AGENT:
        raise NotEligible(
            "Child tasks (task_create) are a feature of scripted plans, not of agent runs.", reason="plan_only"
        )
    task = Task.objects.select_related("org", "agent").get(pk=run.task_id)
    return task_create(
        org=task.org,
        actor=worker,
        title=title,
        agent=agent or task.agent.name,
        input=input,
        parent=task.pk,
        private=task.private,
        creator=task.creator,
    )


def _request_stop(run: Run, *, actor, reason: str) -> bool:
    """running → stopping, inside the caller's transaction, with its event. False if it was not running."""
    moved = RUNS.move(
        run.pk,
        RunStatus.STOPPING,
        strict=False,
        stop_reason=reason,
        stop_requested_by=actor_label(actor),
        stop_requested_at=timezone.now(),
        event=NewEvent("run_stop_requested", actor, run.org_id, run.task_id, run.pk, {"reason": reason}),
    )
    if moved:
        run.refresh_from_db(fields=["status", "stop_reason", "stop_requested_by", "stop_requested_at"])
    return bool(moved)


def authorize_person(actor, org_id: int, role: str = "operator") -> None:
    """People are checked (tasks.authz); the system's own actors (supervisor, demo) are labels, trusted."""
    if isinstance(actor, str) or actor is None or isinstance(actor, Worker):
        return
    require_role(actor, org_id, role)


def actor_label(actor) -> str:
    return str(getattr(actor, "username", None) or actor)[:150]


def run_end(run: Run, to: str, *, actor, kind: str, payload: dict, expect=None, **fields) -> Run:
    """Move a run to a final status, follow with its task's status, append its event, and tell
    the listeners (recovery settles the attempt it belongs to), all in the caller's transaction."""
    RUNS.move(
        run.pk,
        to,
        expect=expect,
        event=NewEvent(
            kind, actor, run.org_id, run.task_id, run.pk, {"status": to, "continues": run.continues_id, **payload}
        ),
        **fields,
    )
    run.refresh_from_db()
    if run.started_at is None:
        # Follow-ups admitted into a run no worker started were never delivered: they wait again.
        MESSAGES.move_all(
            Message.objects.filter(run=run),
            MessageStatus.WAITING,
            expect=MessageStatus.ADMITTED,
            run=None,
            waiting_reason=f"Waiting: run #{run.pk} was {run.status} before any worker started it.",
        )
    else:
        _unread_messages_return(run, actor=actor)
    task_status_follows(run.task_id, _task_status_after(run))
    lifecycle.run_ended(run)
    return run


def held_run(*, worker: Worker, run_id: int, epoch) -> Run:
    """Lock and return the run `worker` holds at `epoch` (StaleLease if not), with its task and organization."""
    run = _held_run(worker=worker, run_id=run_id, epoch=epoch)
    run.task = Task.objects.select_related("org").get(pk=run.task_id)
    return run


def run_validated(run: Run, *, actor, checked: int) -> None:
    """The worker holding the workspace found it as the manifest says: the continuation starts now (its attempt
    and action settle here, not at the claim), with its event, in the caller's transaction."""
    run.carry = {**(run.carry or {}), "validated": True}
    Run.objects.filter(pk=run.pk).update(carry=run.carry)
    event_append(
        org_id=run.org_id,
        task_id=run.task_id,
        run_id=run.pk,
        kind="run_workspace_checked",
        actor=actor,
        payload={"checked": checked, "worker": run.lease_owner},
    )
    lifecycle.run_started(run)


def run_refused_by_worker(run: Run, *, actor, detail: str, files: int) -> Run:
    """The worker holding the workspace found it differs from the manifest before the continuation ran anything:
    the run ends `failed` with `workspace_validation_failed`, as one refused at admission — never started
    (nothing of it ran), its follow-ups waiting again — in the caller's transaction."""
    MESSAGES.move_all(
        Message.objects.filter(run=run),
        MessageStatus.WAITING,
        expect=MessageStatus.DELIVERED,
        run=None,
        waiting_reason=f"Waiting: run #{run.pk} was refused before it ran (its workspace differs from the manifest).",
    )
    return run_end(
        run,
        RunStatus.FAILED,
        actor=actor,
        kind="run_refused",
        payload={"error_code": WORKSPACE_VALIDATION_FAILED, "reason": "workspace validation", "files": files},
        expect=RunStatus.RUNNING,
        started_at=None,
        error_code=WORKSPACE_VALIDATION_FAILED,
        error_detail=detail,
        finished_at=timezone.now(),
        carry={**(run.carry or {}), "refused": WORKSPACE_VALIDATION_FAILED},
    )


DIVERGED = "diverged"


def _diverged(diverged) -> dict:
    """The two calls of a replay that diverged at one step, as saved (API.md, Agent runs: finish)."""
    if not isinstance(diverged, dict):
        raise Invalid(
            '`diverged` must be {"seq", "saved": {"tool", "args"}, "asked": {"tool", "args"}}.', field="diverged"
        )
    seq = diverged.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool) or not 1 <= seq <= MAX_SEQ:
        raise Invalid(f"`diverged.seq` must be a step number from 1 to {MAX_SEQ}.", field="diverged.seq")
    calls = {}
    for side in ("saved", "asked"):
        call = diverged.get(side)
        if not isinstance(call, dict) or not isinstance(call.get("tool"), str) or not call["tool"]:
            raise Invalid(f"`diverged.{side}` must name its `tool`.", field=f"diverged.{side}")
        args = _stored(call.get("args") if call.get("args") is not None else {}, f"diverged {side} arguments")
        if not payloads.is_object(args):
            raise Invalid(f"`diverged.{side}.args` must be an object.", field=f"diverged.{side}")
        calls[side] = {"tool": call["tool"][:100], "args": args}
    return {"seq": seq, **calls}


def _unread_messages_return(run: Run, *, actor) -> None:
    """Follow-ups handed to `run` that it ended without acknowledging, settled in its end's transaction.

    On a closed task they are not delivered (kept and shown). Otherwise a run cut off or stopped before
    reading them gives them back: the next run of the task carries them again. A run that finished its
    work (failed, succeeded) without reading them gives them back once; after a second such hand-over
    they stay delivered to that run: its worker does not acknowledge follow-ups.
    The task's row is locked first, so a follow-up saved meanwhile is seen by the task's status after.
    """
    status = Task.objects.select_for_update().filter(pk=run.task_id).values_list("status", flat=True).first()
    unread = Message.objects.filter(run=run, status=MessageStatus.DELIVERED)
    if status in (TaskStatus.DONE, TaskStatus.CANCELLED):
        gone = MESSAGES.move_all(
            unread,
            MessageStatus.NOT_DELIVERED,
            expect=MessageStatus.DELIVERED,
            waiting_reason=f"Not delivered: the task was closed before run #{run.pk} read it.",
        )
        if gone:
            event_append(
                org_id=run.org_id,
                task_id=run.task_id,
                run_id=run.pk,
                kind="messages_not_delivered",
                actor=actor,
                payload={"messages": gone, "reason": "task closed"},
            )
        return
    if run.status in (RunStatus.SUCCEEDED, RunStatus.FAILED):
        unread = unread.filter(handovers__lt=MAX_HANDOVERS_UNREAD)
    back = MESSAGES.move_all(
        unread,
        MessageStatus.WAITING,
        expect=MessageStatus.DELIVERED,
        run=None,
        waiting_reason=f"Waiting: run #{run.pk} ended ({run.status}) before reading it; the next run carries it.",
    )
    if back:
        event_append(
            org_id=run.org_id,
            task_id=run.task_id,
            run_id=run.pk,
            kind="messages_returned",
            actor=actor,
            payload={"messages": back, "status": run.status},
        )


@transaction.atomic
def run_finish(
    *,
    worker: Worker,
    run_id: int,
    epoch: int,
    status: str,
    error_code: str = "",
    detail: str = "",
    output=None,
    diverged=None,
) -> Run:
    """End the worker's execution of a run.

    running → succeeded (a plan run only when every step of the plan completed; an agent run when no step is
    still in flight) | failed; stopping → stopped with a stop receipt (or succeeded, when the worker
    reports that every step completed before it saw the stop: the evidence says
    the work is done). `succeeded` is refused while a step is still planned or
    dispatched; `stopped` is refused for a run nobody asked to stop.

    `output` (what the agent returned) is kept on the run. `error_code` `diverged` (status failed, with
    `diverged`: the step and its saved and asked calls) ends the run failed even while stopping; recovery
    opens a `diverged` action in this transaction (recovery.actions.settle). Nothing continues it by itself.
    """
    run = _held_run(worker=worker, run_id=run_id, epoch=epoch, plan=True)
    if status not in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.STOPPED):
        raise Invalid("`status` must be succeeded, failed or stopped.", field="status")
    error_code = (error_code or "")[:64]
    if error_code == DIVERGED or diverged is not None:
        if error_code != DIVERGED or status != RunStatus.FAILED:
            raise Invalid(
                '`diverged` goes with `"status": "failed", "error_code": "diverged"`, and only with them.',
                field="diverged",
            )
        diverged = _diverged(diverged)
    if output is not None:
        output = _stored(output, "run output")
    if status == RunStatus.SUCCEEDED:
        if run.kind == RunKind.AGENT:
            if run.steps.filter(phase=StepPhase.DISPATCHED).exists():
                raise NotEligible("A step of this run is still in flight (dispatched, no result): it cannot succeed.")
        else:
            if run.steps.filter(phase__in=(StepPhase.PLANNED, StepPhase.DISPATCHED)).exists():
                raise NotEligible("A run with an unfinished step cannot succeed.")
            planned = len(run.input.get("steps", [])) if isinstance(run.input, dict) else 0
            dropped = {d.get("seq") for d in (run.carry or {}).get("dropped", []) if not d.get("parent_seq")}
            done = run.steps.filter(parent_seq__isnull=True, seq__lte=planned, phase=StepPhase.COMPLETED).count()
            if done + len(dropped) != planned:
                raise NotEligible(f"Only {done} of the plan's {planned} steps completed; the run cannot succeed.")
    if status == RunStatus.STOPPED and run.status != RunStatus.STOPPING:
        raise NotEligible(
            f"Run #{run.pk} was not asked to stop; finish it as failed (with an error code) or succeeded.",
            reason="not_stopping",
        )
    now = timezone.now()
    receipt = None
    if diverged is not None:
        final = RunStatus.FAILED
    elif run.status == RunStatus.STOPPING:
        final = RunStatus.SUCCEEDED if status == RunStatus.SUCCEEDED else RunStatus.STOPPED
        receipt = {"by": "worker", "epoch": epoch, "at": now.isoformat(), "reported": status}
    else:
        final = status
    payload = {"error_code": error_code, "receipt": receipt}
    if diverged is not None:
        payload["diverged"] = {
            "seq": diverged["seq"],
            "saved": diverged["saved"]["tool"],
            "asked": diverged["asked"]["tool"],
        }
    return run_end(
        run,
        final,
        actor=worker,
        kind="run_stopped" if final == RunStatus.STOPPED else "run_finished",
        payload=payload,
        expect=run.status,
        error_code=error_code,
        error_detail=(detail or "")[:10_000],
        finished_at=now,
        stop_receipt=receipt,
        output=output,
        diverged=diverged,
    )


# --- operators -------------------------------------------------------------


@transaction.atomic
def run_request_stop(*, actor, run: Run, reason: str = "stop") -> Run:
    """A person's Stop. running → stopping; queued → stopped (it never started: the stop is verified).

    Stopping or final runs are returned unchanged: pressing Stop twice does nothing more.
    """
    authorize_person(actor, run.org_id)
    run = Run.objects.select_for_update().get(pk=run.pk)
    if run.status == RunStatus.RUNNING:
        _request_stop(run, actor=actor, reason=reason)
    elif run.status == RunStatus.QUEUED:
        now = timezone.now()
        receipt = {"by": "not_started", "at": now.isoformat()}
        run = run_end(
            run,
            RunStatus.STOPPED,
            actor=actor,
            kind="run_stopped",
            payload={"receipt": receipt},
            expect=RunStatus.QUEUED,
            stop_reason=reason,
            stop_requested_by=actor_label(actor),
            stop_requested_at=now,
            stop_receipt=receipt,
            finished_at=now,
        )
    return run


def _descendant_ids(task: Task) -> list[int]:
    ids, frontier = [], [task.pk]
    while frontier and len(ids) < 10_000:
        frontier = list(Task.objects.filter(parent_id__in=frontier).values_list("pk", flat=True))
        ids += frontier
    return ids


@transaction.atomic
def task_pause(*, actor, task: Task) -> Task:
    """Pause a task: admission closes for it and its descendants, and their running
    runs are asked to stop at the next step boundary. Pausing twice changes nothing."""
    authorize_person(actor, task.org_id)
    if Task.objects.filter(pk=task.pk, paused=False).update(paused=True, updated_at=timezone.now()) != 1:
        task.refresh_from_db()
        return task
    event_append(org_id=task.org_id, task_id=task.pk, kind="task_paused", actor=actor)
    for run in Run.objects.select_for_update().filter(
        task_id__in=[task.pk, *_descendant_ids(task)], status=RunStatus.RUNNING
    ):
        _request_stop(run, actor=actor, reason="paused")
    task.refresh_from_db()
    return task


@transaction.atomic
def task_resume(*, actor, task: Task) -> Task:
    """Lift a pause. A run stopped by the pause continues once, through normal admission (the supervisor)."""
    authorize_person(actor, task.org_id)
    if Task.objects.filter(pk=task.pk, paused=True).update(paused=False, updated_at=timezone.now()) == 1:
        event_append(org_id=task.org_id, task_id=task.pk, kind="task_resumed", actor=actor)
    task.refresh_from_db()
    return task


def run_cancel_queued(*, actor, run_id: int, error_code: str = "", detail: str = "", payload=None) -> bool:
    """queued → cancelled (it never started), with its event. Returns False if it was no longer queued."""
    run = Run.objects.filter(pk=run_id, status=RunStatus.QUEUED).first()
    if run is None:
        return False
    try:
        run_end(
            run,
            RunStatus.CANCELLED,
            actor=actor,
            kind="run_cancelled",
            payload={"error_code": error_code, **(payload or {})},
            expect=RunStatus.QUEUED,
            finished_at=timezone.now(),
            error_code=error_code[:64],
            error_detail=detail,
        )
    except NotEligible:
        return False
    return True


# --- the supervisor --------------------------------------------------------


def leases_expire(*, now=None, limit: int = 200) -> list[Run]:
    """Settle every run whose lease lapsed; each in its own transaction.

    running → interrupted; stopping → stopped, the lapse being the stop receipt.
    Rows another supervisor is settling are skipped, never waited for.
    """
    now = now or timezone.now()
    settled = []
    candidates = list(
        Run.objects.filter(status__in=LEASED_RUN_STATUSES, lease_expires_at__lte=now)
        .order_by("lease_expires_at")
        .values_list("pk", flat=True)[:limit]
    )
    for run_id in candidates:
        with transaction.atomic():
            qs = Run.objects.filter(pk=run_id, status__in=LEASED_RUN_STATUSES, lease_expires_at__lte=now)
            if connection.features.has_select_for_update_skip_locked:
                qs = qs.select_for_update(skip_locked=True)
            run = qs.first()
            if run is None:
                continue
            lapsed_at = run.lease_expires_at.isoformat()
            payload = {"lease_owner": run.lease_owner, "lapsed_at": lapsed_at}
            if run.status == RunStatus.RUNNING:
                run = run_end(
                    run,
                    RunStatus.INTERRUPTED,
                    actor="supervisor",
                    kind="run_interrupted",
                    payload=payload,
                    expect=RunStatus.RUNNING,
                    error_code="lease_lapsed",
                    error_detail=f"Worker {run.lease_owner} stopped renewing its lease.",
                    finished_at=now,
                )
            else:
                receipt = {"by": "lease_lapse", "epoch": run.lease_epoch, "at": lapsed_at}
                run = run_end(
                    run,
                    RunStatus.STOPPED,
                    actor="supervisor",
                    kind="run_stopped",
                    payload={**payload, "receipt": receipt},
                    expect=RunStatus.STOPPING,
                    stop_receipt=receipt,
                    finished_at=now,
                )
            settled.append(run)
    return settled
