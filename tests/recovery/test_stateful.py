"""The recovery engine under a random mix of workers, people and supervisors (Hypothesis, stateful).

A simulated worker drives the runner services (claim, plan, dispatch,
complete, heartbeat, finish) and may crash at any boundary (it forgets the run
and leaves the lease). Leases lapse, the supervisor runs, operators and admins
retry, decide, cancel, pause, resume, stop and write follow-ups. Every call goes
through the real service functions against the real test database; a
`ServiceError` is a legitimate refusal, and a refused call must change nothing.

After every step the invariants of DESIGN.md sections 4-7 must hold: attempt
bounds, one live action per (task, kind, run), one execution per task, no
operation of unknown outcome rerun without a person's decision, completed work
carried and never redone, a dropped call never run again, no checkpoint the
engine wrote read as corrupt, no acknowledgement shown as resumption, and a
follow-up delivered to one run of its own task.

Coverage of one run: `pytest --hypothesis-show-statistics` lists what the
examples reached (continuations, chains of three, decisions, ...).
"""

import os
from collections import defaultdict
from datetime import timedelta

import pytest
from django.db.models import Count, F
from django.utils import timezone
from hypothesis import HealthCheck, Phase, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from recovery.actions.commands import action_cancel, action_decide, action_retry
from recovery.actions.followups import message_save
from recovery.models import LIVE_ACTION_STATUSES, ActionKind, ActionStatus, RecoveryAction, RecoveryAttempt
from recovery.rules import classify as c
from recovery.rules.gates import first_closed_gate
from recovery.selectors import admission_facts, diagnose
from recovery.supervisor.loop import runs_awaiting_recovery, supervise_once
from tasks.errors import Forbidden, NotEligible, ServiceError, StaleLease, StaleVersion, TaskClosed
from tasks.holds import task_hold
from tasks.models import LEASED_RUN_STATUSES, LIVE_RUN_STATUSES, Event, Message, Run, RunStatus, Step, Task, Worker
from tasks.selectors import task_facts
from tasks.services import (
    leases_expire,
    run_claim,
    run_finish,
    run_heartbeat,
    run_request_stop,
    step_complete,
    step_dispatch,
    step_plan,
    task_create,
    task_pause,
    task_resume,
)
from tests.factories import make_agent, make_member, make_org, worker_token
from tests.helpers import snapshot

ORG_SLUG = "stateful"
MAX_TASKS = 2

# One tool of each recovery mode (tasks/modes.py defaults), with the mode a plan resolves to.
CALLS = {
    "file_read": ({"path": "notes.txt"}, "replay"),
    "sleep": ({"seconds": 0}, "replay"),
    "file_write": ({"path": "out.txt", "content": "x"}, "notify"),
    "custom_tool": ({"n": 1}, "forget"),  # no declared mode
}

# Writes first and twice: an operation of unknown outcome is where recovery gets interesting.
plans = st.lists(
    st.sampled_from(["file_write", "file_read", "file_write", "sleep", "custom_tool"]), min_size=1, max_size=5
)
picks = st.integers(min_value=0, max_value=7)


def _wipe(org) -> None:
    """Remove everything a previous example left in `org` (the machine runs many examples per test)."""
    RecoveryAction.objects.filter(org=org).delete()  # cascades to attempts and repairs
    Message.objects.filter(org=org).delete()
    Run.objects.filter(org=org).update(continues=None)
    Task.objects.filter(org=org).update(parent=None)
    Task.dependencies.through.objects.filter(from_task__org=org).delete()
    Run.objects.filter(org=org).delete()  # cascades to steps and run events
    Task.objects.filter(org=org).delete()
    Event.objects.filter(org=org).delete()


class RecoveryMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.org = make_org(ORG_SLUG)
        _wipe(self.org)
        make_agent(self.org, "builder")
        make_agent(self.org, "manual", auto_resume=False)
        self.operator = make_member(self.org, "stateful-olive", "operator")
        self.admin = make_member(self.org, "stateful-ada", "admin")
        if not Worker.objects.filter(org=self.org, name="w-stateful").exists():
            worker_token(self.org, "w-stateful")
        self.worker = Worker.objects.get(org=self.org, name="w-stateful")
        # What the simulated worker believes: run id -> the lease epoch it holds.
        self.held: dict[int, int] = {}
        # (source run id, seq): a person accepted rerunning this operation of unknown outcome,
        # by a `not_performed` decision or a retry with the duplicate risk accepted.
        self.authorized: set[tuple[int, int]] = set()
        self.tasks: list[int] = []
        self.diagnosed: set[int] = set()

    # --- helpers -------------------------------------------------------------

    # Preconditions keep the random walk on moves that can do something.
    def has_live_action(self) -> bool:
        return RecoveryAction.objects.filter(org=self.org, status__in=LIVE_ACTION_STATUSES).exists()

    def has_open_unknown(self) -> bool:
        return RecoveryAction.objects.filter(
            org=self.org, status=ActionStatus.OPEN, kind=ActionKind.UNKNOWN_OUTCOME
        ).exists()

    def has_in_flight(self) -> bool:
        return Step.objects.filter(run_id__in=self.held, phase="dispatched").exists()

    def has_paused(self) -> bool:
        return Task.objects.filter(org=self.org, paused=True).exists()

    def _pick(self, i: int) -> int:
        ids = sorted(self.held)
        return ids[i % len(ids)]

    def _task(self, i: int) -> Task:
        return Task.objects.get(pk=self.tasks[i % len(self.tasks)])

    def _action(self, i: int, **filters) -> RecoveryAction | None:
        actions = list(RecoveryAction.objects.filter(org=self.org, **filters).order_by("id"))
        return actions[i % len(actions)] if actions else None

    def _top_steps(self, run_id: int) -> dict[int, Step]:
        return {s.seq: s for s in Step.objects.filter(run_id=run_id, parent_seq__isnull=True)}

    def _lease_live(self, run_id: int, epoch: int) -> bool:
        run = Run.objects.filter(pk=run_id).first()
        return (
            run is not None
            and run.status in LEASED_RUN_STATUSES
            and run.lease_worker_id == self.worker.pk
            and run.lease_epoch == epoch
            and run.lease_expires_at > timezone.now()
        )

    def _runner_write(self, run_id: int, call):
        """One runner write as the worker makes it: (accepted, value or the refusal).

        A write is accepted exactly when the worker holds a live lease; a refused
        write changes nothing; a lost lease makes the worker abandon the run.
        """
        epoch = self.held[run_id]
        live = self._lease_live(run_id, epoch)
        before = snapshot(run_id)
        try:
            value = call(epoch)
        except StaleLease as exc:
            assert not live, f"the live holder of run #{run_id} was refused: {exc.detail}"
            assert snapshot(run_id) == before, "a write refused as stale changed something"
            del self.held[run_id]
            return False, exc
        except ServiceError as exc:
            assert live, f"run #{run_id}: a write without a live lease was refused as {exc.code}, not stale_lease"
            assert snapshot(run_id) == before, f"a refused write ({exc.code}) changed something"
            return False, exc
        assert live, f"run #{run_id} accepted a write at epoch {epoch} without a live lease"
        return True, value

    def _unknown_seqs(self, run_id: int) -> set[int]:
        """Top-level steps of `run_id` left dispatched without a result by a notify tool."""
        return {
            s.seq for s in self._top_steps(run_id).values() if s.phase == "dispatched" and s.recovery_mode == "notify"
        }

    def _action_state(self, action: RecoveryAction) -> tuple:
        fresh = RecoveryAction.objects.filter(pk=action.pk).values().first()
        return (
            fresh,
            list(RecoveryAttempt.objects.filter(action_id=action.pk).values()),
            list(Run.objects.filter(task_id=action.task_id).order_by("id").values("pk", "status")),
        )

    # --- tasks and the worker ------------------------------------------------

    def _create(self, tools, agent="builder", budget=None, child=False) -> None:
        parent = self.tasks[-1] if child and self.tasks else None
        task = task_create(
            org=self.org,
            actor=self.operator,
            title=f"task {len(self.tasks) + 1}",
            agent=agent,
            input={"steps": [{"tool": t, "args": CALLS[t][0]} for t in tools]},
            parent=parent,
            budget_limit=budget,
            creator=self.operator,
        )
        self.tasks.append(task.pk)
        run = Run.objects.get(task=task)
        assert run.status == RunStatus.QUEUED and run.attempt == 1 and run.continues_id is None

    @initialize(tools=plans, agent=st.sampled_from(["builder", "builder", "manual"]))
    def first_task(self, tools, agent):
        self._create(tools, agent)

    @precondition(lambda self: len(self.tasks) < MAX_TASKS)
    @rule(
        tools=plans,
        agent=st.sampled_from(["builder", "builder", "manual"]),
        budget=st.sampled_from([None, None, None, 3]),
        child=st.booleans(),
    )
    def create_task(self, tools, agent, budget, child):
        self._create(tools, agent, budget, child)

    @rule(label=st.sampled_from(["a", "b"]))
    def claim(self, label):
        self._claim(label)

    def _claim(self, label):
        run = run_claim(worker=self.worker, label=label)
        if run is None:
            for queued in Run.objects.filter(org=self.org, status=RunStatus.QUEUED).select_related("task"):
                assert task_hold(task_facts(queued.task)) is not None, f"queued run #{queued.pk} was not claimed"
            return
        assert run.status == RunStatus.RUNNING and run.lease_epoch >= 1 and run.started_at is not None
        assert task_hold(task_facts(Task.objects.get(pk=run.task_id))) is None, "a held task's run was claimed"
        self.held[run.pk] = run.lease_epoch

    def _next_seq(self, run: Run, steps: dict[int, Step]) -> int | None:
        dropped = {d.get("seq") for d in (run.carry or {}).get("dropped", [])}
        for seq in range(1, len(run.input["steps"]) + 1):
            if seq not in steps and seq not in dropped:
                return seq
        return None

    def _plan_next(self, run_id: int) -> int | None:
        """Plan the run's next step, as the worker does: skip reused and dropped steps; at most one in flight.

        Returns the seq of the planned (not yet dispatched) step, or None.
        """
        run = Run.objects.get(pk=run_id)
        steps = self._top_steps(run_id)
        if any(s.phase == "dispatched" or (s.phase == "failed" and s.reused_from_id is None) for s in steps.values()):
            return None  # one call in flight at a time; after a failed call the worker only finishes
        planned = sorted(s.seq for s in steps.values() if s.phase == "planned")
        if planned:
            return planned[0]
        seq = self._next_seq(run, steps)
        if seq is None:
            return None
        call = run.input["steps"][seq - 1]
        accepted, _ = self._runner_write(
            run_id,
            lambda epoch: step_plan(
                worker=self.worker, run_id=run_id, epoch=epoch, seq=seq, tool=call["tool"], args=call["args"]
            ),
        )
        if not accepted:
            return None
        step = Step.objects.get(run_id=run_id, seq=seq)
        assert step.phase == "planned" and step.recovery_mode == CALLS[call["tool"]][1]
        return seq

    def _dispatch(self, run_id: int, seq: int) -> bool:
        accepted, value = self._runner_write(
            run_id, lambda epoch: step_dispatch(worker=self.worker, run_id=run_id, epoch=epoch, seq=seq)
        )
        if accepted:
            assert value.phase == "dispatched" and value.dispatch_epoch == self.held[run_id]
        elif isinstance(value, NotEligible):
            assert Run.objects.get(pk=run_id).status == RunStatus.STOPPING, value.detail
        return accepted

    def _complete(self, run_id: int, ok: bool) -> None:
        step = Step.objects.filter(run_id=run_id, phase="dispatched", parent_seq__isnull=True).first()
        if step is None:
            return
        accepted, value = self._runner_write(
            run_id,
            lambda epoch: step_complete(
                worker=self.worker,
                run_id=run_id,
                epoch=epoch,
                seq=step.seq,
                ok=ok,
                result={"seq": step.seq, "tool": step.tool} if ok else None,
                error="" if ok else "the tool failed",
                usage=1,
            ),
        )
        if accepted:
            saved, stop = value
            assert saved.phase == ("completed" if ok else "failed")
            assert stop == (Run.objects.get(pk=run_id).status == RunStatus.STOPPING)

    def _work(self, i: int, steps: int, dispatch: bool, until_write: bool = False) -> int | None:
        """Claim a run if the worker holds none, then work through its plan: `steps - 1` whole
        steps, then plan (and maybe dispatch) one more, leaving it in flight; with `until_write`,
        stop at the first write instead. Returns the run id."""
        if not self.held:
            self._claim("a")
            if not self.held:
                return None
        run_id = self._pick(i)
        for n in range(steps):
            seq = self._plan_next(run_id) if run_id in self.held else None
            if seq is None:
                break
            last = n == steps - 1
            if until_write:
                last = Step.objects.get(run_id=run_id, seq=seq).recovery_mode == "notify"
            if (dispatch or not last) and self._dispatch(run_id, seq) and not last:
                self._complete(run_id, ok=True)
            if last:
                break
        return run_id

    @rule(i=picks, steps=st.integers(min_value=1, max_value=3), dispatch=st.sampled_from([True, True, True, False]))
    def plan_and_dispatch(self, i, steps, dispatch):
        self._work(i, steps, dispatch)

    @rule(i=picks, steps=st.integers(min_value=1, max_value=4), until_write=st.booleans())
    def worker_dies_mid_step(self, i, steps, until_write):
        """The common disaster in one move: work (maybe up to the next write), die with that call
        in flight, the lease lapses, the supervisor runs."""
        run_id = self._work(i, 5 if until_write else steps, dispatch=True, until_write=until_write)
        if run_id is not None:
            self.held.pop(run_id, None)
            self._lapse()
            self._supervise()

    @precondition(lambda self: self.held and self.has_in_flight())
    @rule(i=picks, ok=st.sampled_from([True, True, True, False]))
    def complete(self, i, ok):
        ids = sorted(Step.objects.filter(run_id__in=self.held, phase="dispatched").values_list("run_id", flat=True))
        self._complete(ids[i % len(ids)], ok)

    @precondition(lambda self: self.held)
    @rule(i=picks)
    def crash(self, i):
        """The worker dies: it forgets the run and leaves its lease to lapse."""
        del self.held[self._pick(i)]

    @precondition(lambda self: self.held)
    @rule(i=picks)
    def heartbeat(self, i):
        run_id = self._pick(i)
        accepted, run = self._runner_write(
            run_id, lambda epoch: run_heartbeat(worker=self.worker, run_id=run_id, epoch=epoch)
        )
        if accepted:
            assert run.lease_expires_at > timezone.now() + timedelta(seconds=60)

    @precondition(lambda self: self.held)
    @rule(i=picks, status=st.sampled_from(["natural", "natural", "failed", "succeeded"]))
    def finish(self, i, status):
        run_id = self._pick(i)
        run = Run.objects.get(pk=run_id)
        steps = self._top_steps(run_id)
        dropped = {d.get("seq") for d in (run.carry or {}).get("dropped", [])}
        n = len(run.input["steps"])
        complete = all(s.phase not in ("planned", "dispatched") for s in steps.values()) and all(
            (seq in steps and steps[seq].phase == "completed") or seq in dropped for seq in range(1, n + 1)
        )
        if status == "natural":
            if run.status == RunStatus.STOPPING:
                status = "stopped"
            elif complete:
                status = "succeeded"
            elif any(s.phase == "failed" for s in steps.values()):
                status = "failed"
            else:
                return  # the worker has more to do
        accepted, value = self._runner_write(
            run_id, lambda epoch: run_finish(worker=self.worker, run_id=run_id, epoch=epoch, status=status)
        )
        if not accepted:
            if isinstance(value, NotEligible):
                assert status == "succeeded" and not complete, value.detail
            return
        assert status != "succeeded" or complete, "an unfinished run was allowed to succeed"
        del self.held[run_id]
        if status == "succeeded":
            expected = RunStatus.SUCCEEDED
        elif run.status == RunStatus.STOPPING or status == "stopped":
            expected = RunStatus.STOPPED
        else:
            expected = RunStatus.FAILED
        assert value.status == expected, (run.status, status, value.status)
        if expected == RunStatus.STOPPED:
            assert value.stop_receipt and value.stop_receipt["by"] == "worker"

    # --- time and the supervisor ----------------------------------------------

    def _lapse(self) -> None:
        before = dict(Run.objects.filter(org=self.org, status__in=LEASED_RUN_STATUSES).values_list("pk", "status"))
        leases_expire(now=timezone.now() + timedelta(days=1))
        after = dict(Run.objects.filter(pk__in=before).values_list("pk", "status"))
        for pk, was in before.items():
            expected = RunStatus.INTERRUPTED if was == RunStatus.RUNNING else RunStatus.STOPPED
            assert after[pk] == expected, (pk, was, after[pk])

    def _supervise(self) -> None:
        supervise_once()
        # Whatever the pass left unrecovered is held by a gate; everything else was
        # continued or given an action.
        for run in runs_awaiting_recovery().filter(org=self.org):
            gate = first_closed_gate(admission_facts(task=run.task, source=run))
            assert gate is not None, f"run #{run.pk} ({run.status}) was neither continued nor given an action"

    @rule()
    def lapse(self):
        """Every lease lapses (the clock moves a day ahead for this sweep)."""
        self._lapse()

    @rule()
    def supervise(self):
        """One supervisor pass at the real time (its own lease sweep finds nothing lapsed)."""
        self._supervise()

    @rule()
    def lapse_then_supervise(self):
        self._lapse()
        self._supervise()

    # --- people ---------------------------------------------------------------

    @precondition(lambda self: self.has_live_action())
    @rule(
        i=picks,
        admin=st.booleans(),
        accept=st.booleans(),
        stale=st.sampled_from([False, False, False, True]),
    )
    def retry(self, i, admin, accept, stale):
        action = self._action(i, status__in=LIVE_ACTION_STATUSES)
        if action is None:
            return
        user = self.admin if admin else self.operator
        unknown = self._unknown_seqs(action.run_id)
        before = self._action_state(action)
        try:
            attempt = action_retry(
                action_id=action.pk,
                user=user,
                version=action.version - 1 if stale else action.version,
                accept_duplicate_risk=accept,
                reason="one more, from the stateful test" if admin else "",
            )
        except ServiceError as exc:
            assert self._action_state(action) == before, f"a refused retry ({exc.code}) changed something"
            assert isinstance(exc, StaleVersion) == stale, exc.detail
            if isinstance(exc, Forbidden):
                assert action.status == ActionStatus.EXHAUSTED and not admin
            return
        assert not stale, "a stale version was accepted"
        assert action.status in (ActionStatus.OPEN, ActionStatus.EXHAUSTED), action.status
        assert admin or action.status == ActionStatus.OPEN, "an operator lifted exhaustion"
        assert accept or (not unknown and action.kind != ActionKind.UNKNOWN_OUTCOME), (
            "an operation of unknown outcome was rerun without accepting the duplicate risk"
        )
        action.refresh_from_db()
        assert action.status == ActionStatus.RETRYING and action.attempts == attempt.number
        cont = attempt.continuation_run
        assert cont.status == RunStatus.QUEUED and cont.continues_id == action.run_id
        if accept:
            self.authorized |= {(action.run_id, seq) for seq in unknown}

    @precondition(lambda self: self.has_open_unknown())
    @rule(
        i=picks,
        outcome=st.sampled_from(["performed", "not_performed", "unresolved"]),
        accept=st.booleans(),
        admin=st.booleans(),
    )
    def decide(self, i, outcome, accept, admin):
        action = self._action(i, status__in=LIVE_ACTION_STATUSES, kind=ActionKind.UNKNOWN_OUTCOME)
        if action is None:
            return
        before = self._action_state(action)
        continuations = Run.objects.filter(continues_id=action.run_id).count()
        try:
            action_decide(
                action_id=action.pk,
                user=self.admin if admin else self.operator,
                version=action.version,
                outcome=outcome,
                note="checked by the stateful test",
                accept_duplicate_risk=accept,
            )
        except ServiceError as exc:
            assert self._action_state(action) == before, f"a refused decision ({exc.code}) changed something"
            if outcome == "not_performed" and not accept:
                assert isinstance(exc, NotEligible), exc.detail
            return
        assert action.status == ActionStatus.OPEN
        assert outcome != "not_performed" or accept, "a rerun was admitted without accepting the duplicate risk"
        fresh = RecoveryAction.objects.get(pk=action.pk)
        if outcome == "unresolved":
            assert fresh.status == ActionStatus.OPEN and fresh.attempts == action.attempts
            # No continuation is made (an earlier attempt's, refused or cancelled before it started, may exist).
            assert Run.objects.filter(continues_id=action.run_id).count() == continuations
            return
        assert fresh.status == ActionStatus.RETRYING
        attempt = fresh.attempt_history.order_by("-number").first()
        assert attempt.decision == outcome and attempt.continuation_run.status == RunStatus.QUEUED
        carried = Step.objects.filter(run=attempt.continuation_run, seq=action.seq).first()
        if outcome == "performed":
            assert carried is not None and carried.result.get("performed") is True
            assert carried.reused_from.run_id == action.run_id
        else:
            assert carried is None, "an operation decided not performed must rerun, not be carried"
            self.authorized.add((action.run_id, action.seq))

    @precondition(lambda self: self.has_live_action())
    @rule(i=picks, stale=st.sampled_from([False, False, False, True]))
    def cancel_action(self, i, stale):
        action = self._action(i, status__in=LIVE_ACTION_STATUSES)
        if action is None:
            return
        before = self._action_state(action)
        try:
            version = action.version - 1 if stale else action.version
            action_cancel(action_id=action.pk, user=self.operator, version=version)
        except ServiceError as exc:
            assert isinstance(exc, StaleVersion) and stale, exc.detail
            assert self._action_state(action) == before
            return
        assert not stale
        fresh = RecoveryAction.objects.get(pk=action.pk)
        assert fresh.status == ActionStatus.CANCELLED
        for attempt in fresh.attempt_history.select_related("continuation_run"):
            run = attempt.continuation_run
            assert run is None or run.status != RunStatus.QUEUED, "a cancelled action left its continuation queued"

    @precondition(lambda self: self.tasks)
    @rule(i=picks)
    def pause(self, i):
        task = self._task(i)
        task_pause(actor=self.operator, task=task)
        task.refresh_from_db()
        assert task.paused
        assert not Run.objects.filter(task=task, status=RunStatus.RUNNING).exists(), "a paused task still runs"

    @precondition(lambda self: self.has_paused())
    @rule(i=picks)
    def resume(self, i):
        paused = list(Task.objects.filter(org=self.org, paused=True).order_by("id"))
        task = paused[i % len(paused)]
        task_resume(actor=self.operator, task=task)
        task.refresh_from_db()
        assert not task.paused

    @precondition(lambda self: self.tasks)
    @rule(i=picks, queued_too=st.sampled_from([False, False, False, True]))
    def stop(self, i, queued_too):
        """A person's Stop on a task's live run (a queued run only sometimes: it ends the task's line)."""
        statuses = (RunStatus.RUNNING, RunStatus.STOPPING, RunStatus.QUEUED) if queued_too else LEASED_RUN_STATUSES
        runs = list(Run.objects.filter(org=self.org, status__in=statuses).order_by("id"))
        if not runs:
            return
        run = runs[i % len(runs)]
        was = run.status
        run = run_request_stop(actor=self.operator, run=run)
        expected = {RunStatus.RUNNING: RunStatus.STOPPING, RunStatus.QUEUED: RunStatus.STOPPED}.get(was, was)
        assert run.status == expected, (was, run.status)

    @precondition(lambda self: self.tasks)
    @rule(i=picks)
    def follow_up(self, i):
        """A person writes a follow-up; the supervisor admits it once the old execution is verifiably over."""
        task = self._task(i)
        before = (Message.objects.count(), Event.objects.count())
        try:
            message = message_save(user=self.operator, task=task, body=f"follow-up on {task.title}")
        except TaskClosed:
            # A closed task refuses follow-ups (nothing would ever deliver them), changing nothing.
            assert task.status in ("done", "cancelled")
            assert (Message.objects.count(), Event.objects.count()) == before
            return
        assert task.status not in ("done", "cancelled"), "a follow-up on a closed task was accepted"
        assert message.status == "waiting" and message.run_id is None

    def teardown(self):
        # What this example reached (`pytest --hypothesis-show-statistics` lists them).
        runs = Run.objects.filter(org=self.org)
        if runs.filter(continues__isnull=False).exists():
            event("a continuation was created")
        if runs.filter(attempt__gte=3).exists():
            event("a chain reached three runs")
        for kind, status in RecoveryAction.objects.filter(org=self.org).values_list("kind", "status").distinct():
            event(f"action {kind} {status}")
        for decision in RecoveryAttempt.objects.filter(action__org=self.org).values_list("decision", flat=True):
            event(f"attempt decision={decision or '-'}")
        if self.authorized:
            event("an unknown outcome was rerun with the risk accepted")

    # --- invariants --------------------------------------------------------------

    @invariant()
    def engine_invariants(self):
        # One invariant calling each check keeps a failing trace readable (one line per step).
        self.check_attempts_within_max()
        self.check_one_live_action_per_task_kind_run()
        self.check_one_execution_per_task()
        self.check_continued_only_once_started()
        self.check_checkpoints_are_never_corrupt()
        self.check_chains()
        self.check_messages()

    def check_messages(self):
        """A follow-up goes to exactly one run of its own task, and only to a run that continues one."""
        for m in Message.objects.filter(org=self.org).exclude(status="waiting").select_related("run"):
            assert m.run is not None and m.run.task_id == m.task_id, (m.pk, m.status, m.run_id)
            assert m.run.continues_id is not None or m.run.attempt == 1, (m.pk, m.run_id)

    def check_attempts_within_max(self):
        over = RecoveryAction.objects.filter(org=self.org, attempts__gt=F("max_attempts"))
        assert not over.exists(), list(over.values("pk", "attempts", "max_attempts"))

    def check_one_live_action_per_task_kind_run(self):
        dupes = (
            RecoveryAction.objects.filter(org=self.org, status__in=LIVE_ACTION_STATUSES)
            .values("task", "kind", "run")
            .annotate(n=Count("id"))
            .filter(n__gt=1)
        )
        assert not dupes.exists(), list(dupes)

    def check_one_execution_per_task(self):
        runs = Run.objects.filter(org=self.org)
        leased = runs.filter(status__in=LEASED_RUN_STATUSES).values("task").annotate(n=Count("id")).filter(n__gt=1)
        assert not leased.exists(), list(leased)
        live = runs.filter(status__in=LIVE_RUN_STATUSES).values("task").annotate(n=Count("id")).filter(n__gt=1)
        assert not live.exists(), list(live)

    def check_continued_only_once_started(self):
        """'Continuing in run #N' only once run N has actually started (DESIGN.md 6)."""
        continued = RecoveryAttempt.objects.filter(action__org=self.org, outcome="continued")
        for attempt in continued.select_related("continuation_run"):
            run = attempt.continuation_run
            assert run is not None and run.started_at is not None, (
                f"attempt {attempt.number} of action #{attempt.action_id} is 'continued' "
                f"but run #{getattr(run, 'pk', None)} ({getattr(run, 'status', None)}) never started"
            )

    def check_checkpoints_are_never_corrupt(self):
        """The engine only wrote consistent checkpoints, so no interrupted or stopped run is corrupt."""
        for run in Run.objects.filter(org=self.org, status__in=(RunStatus.INTERRUPTED, RunStatus.STOPPED)).exclude(
            pk__in=self.diagnosed
        ):
            diagnosis = diagnose(run)
            assert diagnosis.disposition != c.CORRUPT, (run.pk, [r.as_dict() for r in diagnosis.reasons])
            self.diagnosed.add(run.pk)

    def check_chains(self):
        """Along every chain: completed work is carried, unknown outcomes rerun only when a person
        accepted it, dropped calls stay dropped."""
        runs = {r.pk: r for r in Run.objects.filter(org=self.org)}
        steps: dict[int, dict[int, Step]] = defaultdict(dict)
        for s in Step.objects.filter(run__org=self.org, parent_seq__isnull=True):
            steps[s.run_id][s.seq] = s
        for run in runs.values():
            if run.continues_id is None:
                continue
            source = runs[run.continues_id]
            assert run.task_id == source.task_id and run.input == source.input
            assert run.attempt == source.attempt + 1
            chain = []  # earlier runs, nearest first
            prev = source
            while prev is not None:
                chain.append(prev)
                prev = runs.get(prev.continues_id)
            mine = steps[run.pk]

            # A completed step is carried into the continuation and never executed again.
            for earlier in chain:
                for seq, s in steps[earlier.pk].items():
                    if s.phase != "completed":
                        continue
                    new = mine.get(seq)
                    assert new is not None, f"run #{run.pk} lost step {seq} completed in run #{earlier.pk}"
                    assert new.reused_from_id is not None and new.phase == "completed", (
                        f"step {seq} completed in run #{earlier.pk} was executed again in run #{run.pk}"
                    )
                    assert new.dispatch_epoch is None, f"reused step {seq} of run #{run.pk} was dispatched"

            # A reused step points back into its own chain, at the same seq.
            chain_ids = {r.pk for r in chain}
            for seq, s in mine.items():
                if s.reused_from_id is not None:
                    origin = Step.objects.get(pk=s.reused_from_id)
                    assert origin.run_id in chain_ids and origin.seq == seq

            # An operation of unknown outcome is rerun only after a person accepted that.
            for seq, s in mine.items():
                if s.reused_from_id is not None or s.phase == "planned" or s.recovery_mode != "notify":
                    continue
                for earlier in chain:
                    before = steps[earlier.pk].get(seq)
                    if before is None or before.phase == "planned":
                        continue
                    if before.phase == "dispatched":
                        assert (earlier.pk, seq) in self.authorized, (
                            f"step {seq} ({s.tool}) of run #{run.pk} was dispatched again although run "
                            f"#{earlier.pk} left it with an unknown outcome and nobody accepted a rerun"
                        )
                    break

            # A call its recovery mode dropped stays dropped for the rest of the chain.
            dropped = {d.get("seq") for r in [run, *chain] for d in (r.carry or {}).get("dropped", [])}
            for seq in dropped:
                s = mine.get(seq)
                assert s is None or s.reused_from_id is not None, (
                    f"step {seq} was dropped earlier in the chain but run #{run.pk} planned it again"
                )


# Shrinking a failure of this machine takes minutes (longer than pytest's timeout), so by default
# a failure is reported as found; STATEFUL_SHRINK=1 (with --timeout=0) asks for the minimal trace.
PHASES = tuple(Phase) if os.environ.get("STATEFUL_SHRINK") == "1" else (Phase.explicit, Phase.generate)

TestRecovery = pytest.mark.django_db(transaction=True)(RecoveryMachine.TestCase)
TestRecovery.settings = settings(
    max_examples=25,
    stateful_step_count=30,
    deadline=None,
    database=None,  # no .hypothesis/ directory in the project
    phases=PHASES,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.mark.django_db(transaction=True)
def test_a_continuation_that_dropped_a_call_is_not_corrupt_when_it_is_interrupted_too():
    """The machine's first find, pinned: a dropped call leaves no checkpoint in the continuation,
    and that legitimate gap must not read as a contradictory checkpoint once the continuation
    is interrupted in turn. The dropped call stays dropped further down the chain."""
    org = make_org("stateful-gap")
    make_agent(org, "builder")
    worker_token(org, "w-gap")
    worker = Worker.objects.get(org=org, name="w-gap")
    sleep = {"tool": "sleep", "args": {"seconds": 0}}
    task = task_create(
        org=org,
        actor="test",
        title="drop then crash",
        agent="builder",
        input={"steps": [{"tool": "custom_tool", "args": {"n": 1}}, sleep, sleep]},
    )
    first = run_claim(worker=worker, label="a")
    step_plan(worker=worker, run_id=first.pk, epoch=first.lease_epoch, seq=1, tool="custom_tool", args={"n": 1})
    step_dispatch(worker=worker, run_id=first.pk, epoch=first.lease_epoch, seq=1)
    leases_expire(now=timezone.now() + timedelta(days=1))
    supervise_once()
    second = Run.objects.get(continues=first)
    assert [d["seq"] for d in second.carry["dropped"]] == [1]

    second = run_claim(worker=worker, label="a")
    epoch = second.lease_epoch
    for seq in (2, 3):  # the worker skips the dropped step 1; it dies during step 3
        step_plan(worker=worker, run_id=second.pk, epoch=epoch, seq=seq, tool="sleep", args={"seconds": 0})
        step_dispatch(worker=worker, run_id=second.pk, epoch=epoch, seq=seq)
        if seq == 2:
            step_complete(worker=worker, run_id=second.pk, epoch=epoch, seq=seq, ok=True, result={})
    leases_expire(now=timezone.now() + timedelta(days=1))
    supervise_once()

    second.refresh_from_db()
    diagnosis = diagnose(second)
    assert diagnosis.disposition == c.AUTO_RESUMABLE, [r.as_dict() for r in diagnosis.reasons]
    assert not RecoveryAction.objects.filter(task=task).exists()
    third = Run.objects.get(continues=second)
    assert 1 in {d["seq"] for d in third.carry.get("dropped", [])}, "the dropped call came back"


@pytest.mark.django_db(transaction=True)
def test_a_dropped_call_stays_dropped_when_the_continuation_is_interrupted_before_any_step():
    """The machine's second find, pinned: the dropped call was the plan's last step, so the
    continuation has nothing left to run; if its worker dies anyway, the next continuation
    must still drop that call, not run it."""
    org = make_org("stateful-drop")
    make_agent(org, "builder")
    worker_token(org, "w-drop")
    worker = Worker.objects.get(org=org, name="w-drop")
    task_create(
        org=org,
        actor="test",
        title="drop at the end",
        agent="builder",
        input={"steps": [{"tool": "sleep", "args": {"seconds": 0}}, {"tool": "custom_tool", "args": {"n": 1}}]},
    )
    first = run_claim(worker=worker, label="a")
    epoch = first.lease_epoch
    step_plan(worker=worker, run_id=first.pk, epoch=epoch, seq=1, tool="sleep", args={"seconds": 0})
    step_dispatch(worker=worker, run_id=first.pk, epoch=epoch, seq=1)
    step_complete(worker=worker, run_id=first.pk, epoch=epoch, seq=1, ok=True, result={})
    step_plan(worker=worker, run_id=first.pk, epoch=epoch, seq=2, tool="custom_tool", args={"n": 1})
    step_dispatch(worker=worker, run_id=first.pk, epoch=epoch, seq=2)
    leases_expire(now=timezone.now() + timedelta(days=1))
    supervise_once()
    second = Run.objects.get(continues=first)
    assert [d["seq"] for d in second.carry["dropped"]] == [2]

    assert run_claim(worker=worker, label="a").pk == second.pk  # ...and the worker dies at once
    leases_expire(now=timezone.now() + timedelta(days=1))
    supervise_once()
    third = Run.objects.get(continues=second)
    assert 2 in {d["seq"] for d in third.carry.get("dropped", [])}, "the dropped call is planned to run again"
