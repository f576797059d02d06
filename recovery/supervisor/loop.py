"""One supervisor pass. `manage.py supervise` loops it; any number may run at once.

Each duty is idempotent and settled by the database (row locks, compare-and-set
updates, partial unique indexes), so two supervisors, or one run twice, change
nothing more than one pass would.
"""

import logging
import time
from collections import Counter
from dataclasses import dataclass, field

from django.conf import settings
from django.db import IntegrityError, InterfaceError, OperationalError, connection, transaction
from django.utils import timezone

from recovery import notify
from recovery.action_log import action_open_for
from recovery.actions import breakers
from recovery.actions.commands import actions_settle, handovers_run
from recovery.actions.continuations import continuation_create
from recovery.actions.followups import messages_admit
from recovery.models import RecoveryAction
from recovery.rules import classify as c
from recovery.rules.gates import first_closed_gate
from recovery.selectors import admission_facts, awaiting_recovery, diagnose
from recovery.supervisor.passes import PASS_HISTORY, default_label, pass_record, passes_prune
from recovery.supervisor.retention import checkpoints_purge, idempotency_purge, retention
from recovery.workspaces import validation as workspaces
from recovery.workspaces.exports import exports_run
from tasks.errors import GateClosed, NotEligible
from tasks.models import Run, RunStatus, Task, effective_continuation
from tasks.services import leases_expire
from tasks.worker_instances import instances_prune
from tasks.workspace import Budget

log = logging.getLogger("recovery.supervisor.loop")


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
    # Runs a recovery breaker held (no automatic continuation created), and the breakers each pass moved.
    held: list[int] = field(default_factory=list)
    breakers: dict = field(default_factory=dict)
    forgotten: int = 0  # idempotency records purged
    overdue: list[int] = field(default_factory=list)  # decisions newly past their deadline (still open)
    notified: dict = field(default_factory=dict)  # notification deliveries moved, per status
    # Duties that failed in this pass (name -> count): logged and counted, never fatal.
    failed: Counter = field(default_factory=Counter)

    def __bool__(self):
        return bool(
            self.purged
            or self.interrupted
            or self.stopped
            or self.continued
            or self.opened
            or self.admitted
            or self.exported
            or self.overdue
            or any(self.notified.values())
            or self.held
            or any(self.breakers.values())
            or any(self.settled.values())
        )


def runs_awaiting_recovery():
    """Interrupted runs, and runs stopped by a pause or the budget, that nothing has handled yet."""
    return awaiting_recovery().select_related("task__agent__profile", "agent").order_by("id")


def recover_run(run: Run, budget: Budget | None = None) -> tuple[str, int] | None:
    """Continue `run` automatically when its evidence proves that safe; otherwise open an action.

    Returns ("continued", run id), ("opened", action id), ("held", run id) when a recovery breaker holds
    its automatic continuation (recovery.actions.breakers), or None when a gate holds it for now, or when the
    pass's budget for reading workspaces ran out before its workspace was read (it is looked at again on the next pass).
    The workspace is read before the run is locked: validation inside the
    transaction compares that reading and hashes nothing.
    """
    budget = budget if budget is not None else Budget()
    task = Task.objects.select_related("org").get(pk=run.task_id)
    with workspaces.read_ahead_for(task, budget=budget):
        if budget.spent:
            return None
        return _recover_run(run)


def _recover_run(run: Run) -> tuple[str, int] | None:
    with transaction.atomic():
        run = Run.objects.select_for_update(of=("self",)).select_related("task__agent__profile", "agent").get(pk=run.pk)
        continued = Run.objects.filter(effective_continuation(), continues=run).exists()
        if continued or RecoveryAction.objects.filter(run=run).exists():
            return None
        diagnosis = diagnose(run)
        profile = getattr(run.task.agent, "profile", None)
        auto = profile.auto_resume if profile else True
        if diagnosis.disposition == c.AUTO_RESUMABLE and auto and run.status == RunStatus.INTERRUPTED:
            # Automatic recovery opens for a run cut off: counted by its failure signature, which is what the
            # breaker stops. A verified stop is no failure, and a run that waits on a person (a decision, an
            # agent with auto-resume off) is no automatic recovery: a storm of those fills the inbox, not a loop.
            breakers.failure_record(run, diagnosis)
        if diagnosis.disposition == c.AUTO_RESUMABLE and (auto or run.status == RunStatus.STOPPED):
            admitted, in_force = breakers.automatic_admission(run)
            if admitted == "hold":
                return "held", run.pk
            trial = admitted == "probe"
            if first_closed_gate(admission_facts(task=run.task, source=run, breaker_trial=trial)) is not None:
                return None
            try:
                with transaction.atomic():
                    cont = continuation_create(source=run, actor="supervisor", reason="automatic resume")
                    if trial:
                        breakers.trial_taken(in_force, cont)
            except (NotEligible, GateClosed, IntegrityError):
                return None
            if workspaces.refused(cont):
                # The workspace differs from its manifest: the continuation was refused, an action lists why.
                return "opened", workspaces.refusal_of(cont).extra["action"]
            return "continued", cont.pk
        if diagnosis.disposition == c.AUTO_RESUMABLE:
            action = action_open_for(run, diagnosis, cause="auto_resume_off")
        else:
            action = action_open_for(run, diagnosis)
        return "opened", action.pk


def supervise_once(*, label: str = "", interval: float | None = None, exports: bool = True) -> PassReport:
    """Expire lapsed leases, recover what they left, settle actions, admit follow-ups, export what succeeded,
    purge expired checkpoints and idempotency records.

    Never raises for a failing duty (see `_duty`). Each pass is counted for the supervisor process `label`
    (recovery/supervisor/passes.py), with the duties that failed in it. `exports=False` leaves exports to the caller:
    `manage.py supervise` copies them in a thread of their own, so a large workspace never delays a pass.
    """
    label = label or default_label()
    started_at, clock = timezone.now(), time.monotonic()
    report = _pass(label=label, exports=exports)
    interval = float(settings.CONSOLE_SUPERVISE_SECONDS if interval is None else interval)
    failed = _unrecorded.setdefault(label, Counter())
    failed.update(report.failed)
    recorded = Counter(failed)
    with _duty("pass_record", PassReport()) as ok:
        pass_record(
            label=label,
            interval=interval,
            started_at=started_at,
            duration=time.monotonic() - clock,
            report=report,
            failed=recorded,
        )
    if ok:
        failed.subtract(recorded)  # counted now; a count that could not be written is added to the next pass's
    else:
        failed["pass_record"] += 1
    return report


# Failed duties of each supervisor process not yet written to its row (the write itself may be what failed).
_unrecorded: dict[str, Counter] = {}
# The last failure of each duty, so a failure repeated pass after pass logs its traceback once.
_last_failure: dict[str, str] = {}


def duty_failed(*, label: str, duty: str) -> None:
    """A duty the supervisor process `label` runs outside its pass (bulk operations) failed: counted with the
    pass's own failures at the next pass, after its connection is made fresh."""
    _unrecorded.setdefault(label or default_label(), Counter())[duty] += 1
    _fresh_connection()


class _duty:
    """Runs one duty of a pass; any error in it is logged, counted in `report.failed` and swallowed.

    Duties are independent and idempotent (each settles its own rows with its own transactions), so one that
    fails — "database is locked", a lock or statement timeout, a connection the database dropped, a bug —
    costs only itself: the pass goes on with the others and the next pass tries it again.
    """

    def __init__(self, name: str, report: PassReport):
        self.name, self.report, self.ok = name, report, True

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if exc is None or not isinstance(exc, Exception):
            return False
        self.ok = False
        self.report.failed[self.name] += 1
        described = f"{type(exc).__name__}: {exc}"
        log.error(
            "supervisor duty %s failed (%s); the pass goes on, the next pass tries it again",
            self.name,
            described,
            exc_info=_last_failure.get(self.name) != described,
        )
        _last_failure[self.name] = described
        _fresh_connection()
        return True

    def __bool__(self):
        return self.ok


def _fresh_connection() -> None:
    """After a failure the connection may be broken (dropped by the database, or in a failed transaction):
    close it, so the next duty opens (or takes from the pool) a working one."""
    if connection.in_atomic_block:
        return
    try:
        connection.close()
    except Exception:  # closing a connection the database already dropped
        log.debug("closing the failed connection", exc_info=True)


def _connection_lost(exc: Exception) -> bool:
    """A failure every run would meet alike (the database is locked, gone, or timing out): stop trying runs."""
    return isinstance(exc, (OperationalError, InterfaceError))


def _recover(report: PassReport, budget: Budget) -> None:
    for run in runs_awaiting_recovery()[:200]:
        try:
            outcome = recover_run(run, budget)
        except Exception as exc:
            if _connection_lost(exc):
                raise
            # One run whose recovery fails (a bug, bad data) must not hold back the others behind it.
            log.exception("supervisor: recovering run #%s failed; the others go on", run.pk)
            report.failed["recover"] += 1
            _fresh_connection()
            continue
        if outcome is not None:
            {"continued": report.continued, "held": report.held}.get(outcome[0], report.opened).append(outcome[1])


def _pass(*, label: str, exports: bool) -> PassReport:
    report = PassReport()
    with _duty("leases_expire", report):
        for run in leases_expire():
            (report.interrupted if run.status == RunStatus.INTERRUPTED else report.stopped).append(run.pk)
    # One budget for reading workspaces per pass (CONSOLE_WORKSPACE_HASH_BUDGET): once spent, what is left waits
    # for the next pass, so no workspace stalls the pass for every organization.
    budget = Budget()
    # Breakers first: one closed by its trial's success lets this very pass continue what it held.
    with _duty("breakers_sweep", report):
        report.breakers = breakers.breakers_sweep()
    with _duty("recover", report):
        _recover(report, budget)
    # An agent whose setting says `tell_agent` is handed its unknown outcomes with no person (DESIGN §13).
    handed: list[int] = []
    with _duty("handovers_run", report):
        handed = handovers_run()
    with _duty("actions_settle", report):
        report.settled = actions_settle()
        report.settled["handed"] = handed
    # Decisions past their deadline are noticed (never decided); then what the outbox holds is sent (DESIGN §14).
    with _duty("overdue_notice", report):
        report.overdue = notify.overdue_notice()
    with _duty("deliveries_run", report):
        report.notified = notify.deliveries_run()
    with _duty("messages_admit", report):
        report.admitted = messages_admit(budget=budget)
    with _duty("checkpoints_purge", report):
        report.purged = checkpoints_purge()
    with _duty("idempotency_purge", report):
        report.forgotten = idempotency_purge()
    now = timezone.now()
    with _duty("instances_prune", report):
        instances_prune(before=now - retention())
    with _duty("passes_prune", report):
        passes_prune(before=now - PASS_HISTORY)
    if exports:
        with _duty("exports_run", report):
            report.exported = exports_run(label=label)
    if report:
        log.info("supervisor pass: %s", report)
    return report
