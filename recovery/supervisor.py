"""One supervisor pass. `manage.py supervise` loops it; any number may run at once.

Each duty is idempotent and settled by the database (row locks, compare-and-set
updates, partial unique indexes), so two supervisors, or one run twice, change
nothing more than one pass would.
"""

import logging
import time
from dataclasses import dataclass, field

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from recovery import classify as c
from recovery import workspaces
from recovery.actions import action_open, actions_settle, handovers_run
from recovery.continuations import continuation_create
from recovery.exports import exports_run
from recovery.followups import messages_admit
from recovery.gates import first_closed_gate
from recovery.models import ActionKind, ActionStatus, RecoveryAction
from recovery.passes import PASS_HISTORY, default_label, pass_record, passes_prune
from recovery.retention import checkpoints_purge, retention
from recovery.selectors import admission_facts, diagnose
from tasks.batches import NESTED_BASE
from tasks.errors import GateClosed, NotEligible
from tasks.models import Run, RunStatus, effective_continuation
from tasks.services import leases_expire
from tasks.workers import instances_prune

log = logging.getLogger("recovery.supervisor")


@dataclass
class PassReport:
    interrupted: list[int] = field(default_factory=list)
    stopped: list[int] = field(default_factory=list)
    continued: list[int] = field(default_factory=list)
    opened: list[int] = field(default_factory=list)
    settled: dict = field(default_factory=dict)
    admitted: list[int] = field(default_factory=list)
    purged: list[int] = field(default_factory=list)
    exported: list[int] = field(default_factory=list)

    def __bool__(self):
        return bool(
            self.purged
            or self.interrupted
            or self.stopped
            or self.continued
            or self.opened
            or self.admitted
            or self.exported
            or any(self.settled.values())
        )


def runs_awaiting_recovery():
    """Interrupted runs, and runs stopped by a pause or the budget, that nothing has handled yet."""
    return (
        Run.objects.filter(
            Q(status=RunStatus.INTERRUPTED) | Q(status=RunStatus.STOPPED, stop_reason__in=("paused", "budget"))
        )
        .exclude(Exists(Run.objects.filter(effective_continuation(), continues=OuterRef("pk"))))
        # A later run that continues nothing is a fresh start: the old chain is not recovered.
        .exclude(Exists(Run.objects.filter(task=OuterRef("task"), pk__gt=OuterRef("pk"), continues__isnull=True)))
        .filter(actions__isnull=True)
        .exclude(task__status__in=("done", "cancelled"))
        .select_related("task__agent__profile", "agent")
        .order_by("id")
    )


def _blocking_cause(diagnosis) -> str:
    codes = [r.code for r in diagnosis.reasons]
    if diagnosis.disposition == c.CORRUPT:
        return "corrupt_checkpoint"
    for code in c.UNAVAILABLE:  # recovery unavailable: what remains is start over or cancel
        if code in codes:
            return code
    if diagnosis.disposition == c.EXHAUSTED:
        return codes[0]
    if "unknown_outcome" in codes:
        return "unknown_outcome"
    if "step_failed" in codes:
        return "step_failed"
    return codes[0] if codes else "needs_decision"


def recover_run(run: Run) -> tuple[str, int] | None:
    """Continue `run` automatically when its evidence proves that safe; otherwise open an action.

    Returns ("continued", run id), ("opened", action id), or None when a gate
    holds it for now (it is looked at again on the next pass).
    """
    with transaction.atomic():
        run = Run.objects.select_for_update(of=("self",)).select_related("task__agent__profile", "agent").get(pk=run.pk)
        continued = Run.objects.filter(effective_continuation(), continues=run).exists()
        if continued or RecoveryAction.objects.filter(run=run).exists():
            return None
        diagnosis = diagnose(run)
        profile = getattr(run.task.agent, "profile", None)
        auto = profile.auto_resume if profile else True
        if diagnosis.disposition == c.AUTO_RESUMABLE and (auto or run.status == RunStatus.STOPPED):
            if first_closed_gate(admission_facts(task=run.task, source=run)) is not None:
                return None
            try:
                with transaction.atomic():
                    cont = continuation_create(source=run, actor="supervisor", reason="automatic resume")
            except (NotEligible, GateClosed, IntegrityError):
                return None
            if workspaces.refused(cont):
                # The workspace differs from its manifest: the continuation was refused, an action lists why.
                return "opened", workspaces.refusal_of(cont).extra["action"]
            return "continued", cont.pk
        evidence = {
            "disposition": diagnosis.disposition,
            "reasons": [r.as_dict() for r in diagnosis.reasons],
            "run_status": run.status,
            "error_code": run.error_code,
            "error_detail": run.error_detail,
        }
        exhaustion = ""
        if diagnosis.disposition == c.AUTO_RESUMABLE:
            cause = "auto_resume_off"
            kind, seq, owner, status = ActionKind.CONTINUATION, None, "role:operator", ActionStatus.OPEN
        else:
            cause = _blocking_cause(diagnosis)
            if cause in c.UNAVAILABLE:
                evidence["remaining"] = ["start_over", "cancel"]
            unknown = [r for r in diagnosis.reasons if r.code == "unknown_outcome" and r.seq is not None]
            if diagnosis.disposition == c.NEEDS_DECISION and cause == "unknown_outcome" and unknown:
                seq = unknown[0].seq
                step = run.steps.get(seq=seq)
                evidence.update(
                    {
                        "seq": seq,
                        "tool": step.tool,
                        "args": step.args,
                        "dispatched_at": step.dispatched_at.isoformat() if step.dispatched_at else None,
                        "recovery_mode": step.recovery_mode,
                    }
                )
                if step.parent_seq is not None:  # a batch item or a subagent's call: say which
                    evidence.update({"parent_seq": step.parent_seq, "item": step.seq - step.parent_seq * NESTED_BASE})
                kind = ActionKind.UNKNOWN_OUTCOME
            else:
                seq = next((r.seq for r in diagnosis.reasons if r.seq is not None), None)
                kind = ActionKind.CONTINUATION
            exhausted = diagnosis.disposition == c.EXHAUSTED
            owner = "role:admin" if exhausted else "role:operator"
            status = ActionStatus.EXHAUSTED if exhausted else ActionStatus.OPEN
            exhaustion = cause if exhausted else ""
        action = action_open(
            run=run,
            kind=kind,
            cause=cause,
            evidence=evidence,
            seq=seq,
            recovery_owner=owner,
            status=status,
            exhaustion=exhaustion,
        )
        return "opened", action.pk


def supervise_once(*, label: str = "", interval: float | None = None) -> PassReport:
    """Expire lapsed leases, recover what they left, settle actions, admit follow-ups, export what succeeded,
    purge expired checkpoints.

    Each pass is counted for the supervisor process `label` (recovery/passes.py).
    """
    started_at, clock = timezone.now(), time.monotonic()
    report = _pass()
    interval = float(settings.CONSOLE_SUPERVISE_SECONDS if interval is None else interval)
    pass_record(
        label=label or default_label(),
        interval=interval,
        started_at=started_at,
        duration=time.monotonic() - clock,
        report=report,
    )
    return report


def _pass() -> PassReport:
    report = PassReport()
    for run in leases_expire():
        (report.interrupted if run.status == RunStatus.INTERRUPTED else report.stopped).append(run.pk)
    for run in runs_awaiting_recovery()[:200]:
        outcome = recover_run(run)
        if outcome is not None:
            (report.continued if outcome[0] == "continued" else report.opened).append(outcome[1])
    # An agent whose setting says `tell_agent` is handed its unknown outcomes with no person (DESIGN §13).
    handed = handovers_run()
    report.settled = actions_settle()
    report.settled["handed"] = handed
    report.admitted = messages_admit()
    report.purged = checkpoints_purge()
    now = timezone.now()
    instances_prune(before=now - retention())
    passes_prune(before=now - PASS_HISTORY)
    report.exported = exports_run()
    if report:
        log.info("supervisor pass: %s", report)
    return report
