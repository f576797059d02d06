"""Continue from step k: a new run of the task's chain that reuses the saved results of steps 1..k-1 of its
latest run and runs step k onward fresh.

Not a recovery, and no continuation of the run it reuses from: like Start over it starts a new chain
(`continues` null, attempt 1, the old chain no longer recovered, its live actions retired), with the same
refusals (recovery.actions.start_over.refuse_while_held). What it keeps is a prefix of the latest run: each of
steps 1..k-1 is carried as a saved result (a copy with `reused_from`, never executed again — the same copy a
continuation makes, recovery.actions.continuations), with its nested steps. Steps k..n run again; those whose
recovery mode is notify may act outside a second time, so they need the duplicate risk accepted, with a reason.
k = 1 reuses nothing: it is Start over through this path, its consent asked for the latest run's steps only.
A task that is done (its last run succeeded) is reopened by the continuation, in its transaction and with its own
`task_reopened` event: re-running a finished run from a step is what the tool is for. A cancelled task is not: a
person closed it on purpose, and it is refused as Start over refuses it (`task_closed`) until it is reopened.
"""

from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from recovery.actions.continuations import step_copy
from recovery.actions.controls import reopen_move
from recovery.actions.start_over import GROUP_TOOLS, live_action_ids, refuse_while_held, retire_actions
from recovery.selectors import step_modes_now
from tasks.authz import require_role
from tasks.errors import Invalid, NotEligible, NotFound, ServiceError
from tasks.events import event_append
from tasks.models import RecoveryMode, Role, Run, Step, Task, TaskStatus
from tasks.selectors import visible_tasks
from tasks.services import actor_label, run_enqueue

REASON_MAX = 500


class NeedsConsent(ServiceError):
    """A notify-mode step would run again and nobody accepted that it may act outside twice."""

    code = "needs_consent"
    status_code = 409


@dataclass(frozen=True)
class Preview:
    """What Continue from step `seq` would do with run `run` (the task's latest)."""

    task: int
    run: int
    seq: int
    last: int  # the last saved step of the run
    reused: list[int]
    runs_again: list[dict]  # {"seq", "tool", "args", "recovery_mode", "side_effect"}

    @property
    def needs_consent(self) -> bool:
        return any(s["side_effect"] for s in self.runs_again)

    @property
    def side_effects(self) -> list[dict]:
        return [s for s in self.runs_again if s["side_effect"]]

    def as_dict(self) -> dict:
        return {"reused": self.reused, "runs_again": self.runs_again, "needs_consent": self.needs_consent}


def _task_for(user, task_id: int) -> int:
    found = visible_tasks(user).filter(pk=task_id).values_list("org_id", flat=True).first()
    if found is None:
        raise NotFound(f"No task #{task_id}.")
    require_role(user, found, Role.OPERATOR, what=f"No task #{task_id}.")
    return found


def _latest(task_id: int) -> Run:
    run = Run.objects.filter(task_id=task_id).select_related("agent__profile").order_by("-id").first()
    if run is None:
        raise NotEligible(f"Task #{task_id} has no run to continue from.", reason="no_run")
    return run


def _preview(run: Run, seq: int) -> tuple[Preview, list[Step]]:
    steps = list(Step.objects.filter(run=run).order_by("seq"))
    top = [s for s in steps if s.parent_seq is None]
    if not top:
        raise Invalid(f"Run #{run.pk} saved no step; there is no step to continue from.", field="seq", last=0)
    last = top[-1].seq
    if not 1 <= seq <= last:
        raise Invalid(
            f"Step {seq} is not a saved step of run #{run.pk}: "
            + ("its only saved step is step 1." if last == 1 else f"continue from a step from 1 to {last}."),
            field="seq",
            last=last,
        )
    for s in top:
        if s.seq < seq and (s.phase != "completed" or s.result is None):
            raise NotEligible(
                f"Step {s.seq} ({s.tool}) of run #{run.pk} has no saved result to reuse ({s.phase}): "
                f"continue from step {s.seq} or earlier.",
                reason="not_reusable",
                seq=s.seq,
            )
    now_modes = step_modes_now(run, steps)  # the mode each step would be planned with now
    mode = {s.seq: now_modes.get(s.pk, s.recovery_mode) for s in steps}
    # A batch or subagent acts through its nested calls: it may act outside when one of them may.
    parents = {s.parent_seq for s in steps if s.parent_seq is not None}
    nested_notify = {s.parent_seq for s in steps if s.parent_seq is not None and mode[s.seq] == RecoveryMode.NOTIFY}

    def side_effect(s: Step) -> bool:
        if s.tool in GROUP_TOOLS and s.seq in parents:
            return s.seq in nested_notify
        return mode[s.seq] == RecoveryMode.NOTIFY

    runs_again = [
        {"seq": s.seq, "tool": s.tool, "args": s.args, "recovery_mode": mode[s.seq], "side_effect": side_effect(s)}
        for s in top
        if s.seq >= seq
    ]
    reused = [s.seq for s in top if s.seq < seq]
    return Preview(task=run.task_id, run=run.pk, seq=seq, last=last, reused=reused, runs_again=runs_again), steps


def continue_from_preview(*, task_id: int, user, seq: int) -> Preview:
    """What Continue from step `seq` would reuse and run again, read now (operator; 404 for a task the user
    cannot see). 400 `invalid` for a step outside 1..the last saved step; 409 `not_eligible`
    (`reason: not_reusable`) when a step before it has no saved result."""
    _task_for(user, task_id)
    preview, _ = _preview(_latest(task_id), seq)
    return preview


@transaction.atomic
def task_continue_from(*, task_id: int, user, seq: int, accept_duplicate_risk: bool = False, reason: str = "") -> Run:
    """Queue a new run of the task that reuses steps 1..seq-1 of its latest run and runs step seq onward fresh.

    Needs the operator role (404 for a task the user cannot see). Refused as Start over is (409 `gate_closed`,
    `not_eligible` `run_live`); 400 `invalid` for a step outside 1..the last saved step; 409 `not_eligible`
    (`not_reusable`) when a step before it has no saved result; 409 `needs_consent` (`steps`) when a step that
    runs again may act outside (notify mode) and the duplicate risk was not accepted; 400 `reason_required`
    when it was accepted without a reason. Live recovery actions of the task are retired, saying why. Events:
    `run_queued` (with `continued_from`), then `run_continued_from` with what was reused and what runs again.
    """
    _task_for(user, task_id)
    reason = (reason or "").strip()
    if len(reason) > REASON_MAX:
        raise Invalid(f"The reason is at most {REASON_MAX} characters.", field="reason")
    # The lock serializes two people acting on the same task; the partial unique index on live runs settles
    # anything else.
    task = Task.objects.select_for_update(of=("self",)).select_related("agent").get(pk=task_id)
    if task.status == TaskStatus.DONE:
        task = reopen_move(task, actor=user, reason=f"continued from step {seq}", continued_from=seq)
    refuse_while_held(task, what="continue from a step")
    source = _latest(task_id)
    preview, steps = _preview(source, seq)
    risky = preview.side_effects
    if risky and not accept_duplicate_risk:
        raise NeedsConsent(
            f"{_steps_text(risky)} may act outside again if {'it runs' if len(risky) == 1 else 'they run'} again: "
            "accept the duplicate risk, with a reason, to continue from step "
            f"{seq}.",
            steps=[{k: s[k] for k in ("seq", "tool", "args")} for s in risky],
        )
    if accept_duplicate_risk and not reason:
        raise Invalid(
            "Say why the duplicate risk is accepted: a reason is required.", code="reason_required", field="reason"
        )
    retiring = live_action_ids(task)
    who = actor_label(user)
    carry = {
        "continued_from": {
            "run": source.pk,
            "seq": seq,
            "last": preview.last,
            "by": who,
            "reused": preview.reused,
            "runs_again": [s["seq"] for s in preview.runs_again],
            "accepted_duplicate_risk": bool(accept_duplicate_risk and risky),
            "reason": reason,
        }
    }
    run = run_enqueue(
        task=task,
        actor=user,
        input=source.input,
        carry=carry,
        payload={"continued_from": {"run": source.pk, "seq": seq}, "reuses": preview.reused},
    )
    now = timezone.now()
    kept = [s for s in steps if s.parent_seq is None and s.seq < seq]
    Step.objects.bulk_create([step_copy(s, run, now, phase="completed", result=s.result) for s in kept])
    _copy_nested(steps, run, {s.seq for s in kept}, now)
    retire_actions(retiring, note=f"the task was continued from step {seq} by {who} in run #{run.pk}")
    event_append(
        org_id=run.org_id,
        task_id=run.task_id,
        run_id=run.pk,
        kind="run_continued_from",
        actor=user,
        payload={
            "from_run": source.pk,
            "seq": seq,
            "reused": preview.reused,
            "runs_again": [
                {k: s[k] for k in ("seq", "tool", "recovery_mode", "side_effect")} for s in preview.runs_again
            ],
            "accepted_duplicate_risk": bool(accept_duplicate_risk and risky),
            "reason": reason,
            "retired_actions": retiring,
        },
    )
    return run


def _copy_nested(steps: list[Step], run: Run, parents: set[int], now) -> None:
    """The nested steps (batch items, subagent calls) of the carried steps keep their saved work."""
    nested = [s for s in steps if s.parent_seq in parents and s.phase in ("completed", "failed")]
    if not nested:
        return
    copied = {s.seq: s for s in Step.objects.filter(run=run, seq__in=parents)}
    Step.objects.bulk_create(
        [
            step_copy(s, run, now, phase=s.phase, result=s.result, error=s.error, parent=copied.get(s.parent_seq))
            for s in nested
        ]
    )


def _steps_text(steps: list[dict]) -> str:
    """ "Step 4 (bash) and step 5 (http_post)", "Step 2 (bash), step 3 (bash), step 4 (bash) and 2 more"."""
    named = [f"step {s['seq']} ({s['tool']})" for s in steps[:3]]
    more = len(steps) - len(named)
    if more:
        text = f"{', '.join(named)} and {more} more"
    else:
        text = f"{', '.join(named[:-1])} and {named[-1]}" if len(named) > 1 else named[0]
    return text[0].upper() + text[1:]
