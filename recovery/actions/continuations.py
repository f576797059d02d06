"""Continuations: a new run that continues an interrupted or stopped one.

It keeps the source's plan (so `seq` numbering is kept), carries every saved
result (`reuse`: copied as a step with `reused_from`, never re-executed), reruns
what was never dispatched or is safe to replay, drops what its mode drops (and
says so), and refuses anything of unknown outcome unless a person decided it.
"""

from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from recovery.action_log import action_open
from recovery.models import ActionKind
from recovery.rules import classify as c
from recovery.selectors import diagnose, run_facts
from recovery.words.agent_runs import notice_text
from recovery.words.vocabulary import run_status_phrase
from recovery.workspaces import validation as workspaces
from tasks.batches import FOREACH, parent_of
from tasks.errors import NotEligible
from tasks.events import event_append
from tasks.holds import Hold
from tasks.models import WORKSPACE_VALIDATION_FAILED, Message, MessageStatus, Run, RunKind, RunStatus, Step, Task
from tasks.services import run_end, run_enqueue
from tasks.transitions import MESSAGES
from tasks.worker_workspaces import held_by_worker


def classify_as_stopped(run: Run, steps: list[Step]):
    """A failed or succeeded run judged as a stopped one (classify only speaks of interrupted/stopped runs):
    what it completed is reused, what failed is kept, and nothing of it counts as an interruption."""
    from dataclasses import replace

    return c.classify(replace(run_facts(run, steps), status="stopped"))


def source_diagnosis(source: Run, steps: list[Step] | None = None):
    steps = list(Step.objects.filter(run=source).order_by("seq")) if steps is None else steps
    if source.status in ("failed", "succeeded"):
        return classify_as_stopped(source, steps)
    return diagnose(source, steps)


@dataclass(frozen=True)
class Blocked:
    """Why a continuation of a run cannot be admitted outside an action (Continue now, a follow-up), and what a
    person settles first. `kind`: gate (a closed gate: `hold`) | corrupt | unavailable | exhausted (a bound:
    `exhaustion`, and the `recorded` action that was exhausted by it, if a person cancelled that) |
    unknown_outcome (`seq`, nobody decided it)."""

    kind: str
    detail: str = ""
    hold: Hold | None = None
    diagnosis: c.Diagnosis | None = None
    exhaustion: str = ""
    recorded: object = None
    seq: int | None = None

    def action_kwargs(self) -> dict:
        """How `actions.action_open_for` opens the action that asks a person about it."""
        if self.kind != "exhausted":
            return {}
        kwargs = {"cause": self.exhaustion, "exhaustion": self.exhaustion}
        if self.recorded is not None:
            kwargs.update(attempts=self.recorded.attempts, max_attempts=self.recorded.max_attempts)
            kwargs["evidence"] = self.recorded.evidence
        return kwargs


def continuation_blocked(task, source: Run) -> Blocked | None:
    """What refuses a continuation of `source` admitted outside an action, read now; None when it may go.

    The gates (a hold, the workspace, a live lease, the chain's bound), a checkpoint nothing can be reused
    from, and the bounds automatic recovery keeps: an operation interrupted twice in the chain, or attempts an
    action used up and a person cancelled since — only an admin's grant gets past those, never Continue now
    or a follow-up. Then an unknown outcome nobody decided.
    """
    from recovery.rules.gates import first_closed_gate
    from recovery.selectors import admission_facts, recorded_exhaustion

    gate = first_closed_gate(admission_facts(task=task, source=source))
    if gate is not None:
        return Blocked("gate", gate.detail, hold=gate)
    steps = list(Step.objects.filter(run=source).order_by("seq"))
    diagnosis = source_diagnosis(source, steps)
    if diagnosis.disposition == c.CORRUPT or source.recovery_disabled:
        return Blocked("corrupt", diagnosis=diagnosis)
    unavailable = [r for r in diagnosis.reasons if r.code in c.UNAVAILABLE]
    if unavailable:
        return Blocked("unavailable", unavailable[0].detail, diagnosis=diagnosis)
    if diagnosis.disposition == c.EXHAUSTED:
        return Blocked("exhausted", diagnosis=diagnosis, exhaustion=diagnosis.reasons[0].code)
    recorded = recorded_exhaustion(source)
    if recorded is not None:
        return Blocked("exhausted", diagnosis=diagnosis, exhaustion=recorded.exhaustion, recorded=recorded)
    unknown = [v for v in diagnosis.steps if v.parent_seq is None and v.verdict == c.UNKNOWN_OUTCOME]
    if unknown:
        item = next(
            (
                r.seq
                for r in diagnosis.reasons
                if r.code == "unknown_outcome" and r.seq is not None and parent_of(r.seq) == unknown[0].seq
            ),
            None,
        )
        return Blocked("unknown_outcome", diagnosis=diagnosis, seq=item or unknown[0].seq)
    return None


@transaction.atomic
def continuation_create(
    *,
    source: Run,
    actor,
    reason: str,
    performed: dict[int, dict] | None = None,
    rerun: set[int] | frozenset[int] = frozenset(),
    rerun_why: str = "retry",
    allow_final: bool = False,
    notices: dict[int, dict] | None = None,
) -> Run:
    """Queue the continuation of `source`.

    `performed` maps a step of unknown outcome to the outcome a person recorded
    for it (it is carried as a saved result); `rerun` names steps of unknown
    outcome, or failed steps, that a person explicitly chose to run again
    (`rerun_why`: "retry", "decided", "continue_now" or "follow-up", kept in the run's `carry`
    so its page says why each step ran again).
    Either may name a batch item (its nested seq): the batch then resumes with
    that item taken as performed, or run again. A resuming batch carries its
    completed items and keeps its failed ones failed.
    Every follow-up message waiting on the task is admitted into this run, in
    order, in the same transaction. `allow_final` also continues a failed run
    (a follow-up after a failure). Refused (`NotEligible`) for a corrupt
    checkpoint, a run whose recovery is disabled or unavailable (`reason`: its
    code), a run superseded by a fresh start, or an unknown outcome nobody
    decided; refused (GateClosed `workspace_hold`) while a workspace action is live.

    An agent run's continuation carries every saved step of the chain, saved failures included (the agent
    already received them); a step it gets a notice for instead of a result — decided `performed` (the note,
    no saved result), handed to the agent to verify (`notices`: seq → {"decision": "agent_verifies",
    "decided_by", "decided_at", "note"}), or dropped by its mode — is carried as a step without a result and
    listed in the run's `carry["notices"]`, and notices the chain gave earlier stay. Steps of the chain it
    does not carry (cut off in replay mode, never dispatched, decided not performed) are the agent's to plan
    again (`carry["rerun"]`).

    Before it is admitted the workspace is validated (recovery.workspaces.validation): when
    the disk differs from the manifest, the returned run is the refused one —
    already `failed` with `workspace_validation_failed`, never started, with a
    `workspace_validation` action listing each file — and nothing is continued
    (check `workspaces.refused(run)`). A step a person declared performed has
    the disk at its files taken as its effect.
    """
    performed = performed or {}
    # The disk at a performed step's files is taken as its effect, whichever way the agent hears of it.
    # (An agent told to verify a call checks the disk itself: what is there now is what it starts from.)
    notices = dict(notices or {})
    declared_effects = {**performed, **notices}
    rerun = set(rerun)
    source = Run.objects.select_related("task", "agent").get(pk=source.pk)
    agent = source.kind == RunKind.AGENT
    now = timezone.now()
    if agent:
        # A person's "performed" reaches an agent as a notice with their note, never as a saved result.
        for seq, said in performed.items():
            notices.setdefault(
                seq,
                {
                    "decision": "performed",
                    "decided_by": said.get("decided_by"),
                    "decided_at": said.get("at"),
                    "note": said.get("note", ""),
                },
            )
        performed = {}
    # A run that ended by itself (failed, or succeeded while a follow-up waited) is continued on a person's
    # request only: Continue now, a follow-up.
    continuable = ("interrupted", "stopped", "failed", "succeeded") if allow_final else ("interrupted", "stopped")
    if source.status not in continuable:
        raise NotEligible(
            f"Run #{source.pk} {run_status_phrase(source.status)}: only an interrupted or stopped run is continued."
        )
    if source.recovery_disabled:
        raise NotEligible(f"Recovery is disabled for run #{source.pk}: {source.recovery_disabled}")
    steps = list(Step.objects.filter(run=source).order_by("seq"))
    diagnosis = source_diagnosis(source, steps)
    if diagnosis.disposition == c.CORRUPT:
        raise NotEligible(
            f"Run #{source.pk} has a contradictory checkpoint; nothing of it is replayed.",
            reasons=[r.as_dict() for r in diagnosis.reasons],
        )
    unavailable = [r for r in diagnosis.reasons if r.code in c.UNAVAILABLE]
    if unavailable:
        raise NotEligible(
            f"Recovery of run #{source.pk} is unavailable: {unavailable[0].detail} "
            "What remains: start over (a fresh run that reuses nothing) or cancel.",
            reason=unavailable[0].code,
            reasons=[r.as_dict() for r in unavailable],
        )
    fresh = Run.objects.filter(task_id=source.task_id, pk__gt=source.pk, continues__isnull=True).first()
    if fresh is not None:
        raise NotEligible(
            f"Task #{source.task_id} was started over in run #{fresh.pk}; run #{source.pk} is no longer continued.",
            reason="started_over",
        )
    by_seq = {s.seq: s for s in steps}
    verdicts = {v.seq: v for v in diagnosis.steps if v.parent_seq is None}
    items = {v.seq: v for v in diagnosis.steps if v.parent_seq is not None}
    plan_steps = source.input.get("steps") if isinstance(source.input, dict) else []

    def tool_at(seq: int):
        if seq in by_seq:
            return by_seq[seq].tool
        planned = plan_steps[seq - 1] if 0 < seq <= len(plan_steps) else None
        return planned.get("tool") if isinstance(planned, dict) else None

    def undecided_items(seq: int) -> list[int]:
        return [
            k.seq
            for k in items.values()
            if k.parent_seq == seq and k.verdict == c.UNKNOWN_OUTCOME and k.seq not in performed and k.seq not in rerun
        ]

    carried, reran = [], []
    why: dict[int, str] = {}
    # What an earlier continuation dropped stays dropped: it is never run later in the chain.
    dropped = [d for d in (source.carry or {}).get("dropped", []) if d.get("seq") not in verdicts]
    # An agent run's notices: those the chain already gave (kept with their step) and new ones.
    told = {n.get("seq"): n for n in (source.carry or {}).get("notices", []) if isinstance(n, dict)}
    noticed: list[tuple[Step, dict]] = []
    failed_copies = []
    for seq, verdict in sorted(verdicts.items()):
        step = by_seq[seq]
        if agent and seq in told and step.reused_from_id:
            noticed.append((step, told[seq]))
        elif verdict.verdict == c.REUSE and step.phase == "completed":
            carried.append((step, step.result))
        elif agent and verdict.verdict == c.REUSE:
            failed_copies.append(step)  # a failure the agent already received: carried as it is
        elif agent and verdict.verdict == c.UNKNOWN_OUTCOME and seq in notices:
            noticed.append((step, notices[seq]))
        elif agent and verdict.verdict == c.DROP:
            noticed.append((step, {"decision": "dropped", "decided_by": None, "decided_at": now.isoformat(),
                                   "note": verdict.detail}))  # fmt: skip
        elif verdict.verdict == c.UNKNOWN_OUTCOME:
            if seq in performed:
                carried.append((step, performed[seq]))
            elif seq in rerun:
                reran.append(seq)
                why[seq] = rerun_why
            elif step.tool == FOREACH and verdict.reason == "unknown_outcome" and not undecided_items(seq):
                reran.append(seq)  # every item of unknown outcome was decided: the batch resumes
                why[seq] = "resumes"
            else:
                undecided = undecided_items(seq) if step.tool == FOREACH else []
                raise NotEligible(
                    f"Step {seq} ({step.tool}) has an unknown outcome; a person must decide it first.",
                    reason="unknown_outcome",
                    seq=undecided[0] if undecided else seq,
                )
        elif verdict.verdict == c.REUSE:  # a saved failure: rerun only on request
            if seq not in rerun:
                raise NotEligible(f"Step {seq} ({step.tool}) failed; retrying it must be asked for.", seq=seq)
            reran.append(seq)
            why[seq] = rerun_why
        elif verdict.verdict == c.DROP:
            dropped.append({"seq": seq, "tool": step.tool, "reason": verdict.detail})
        else:  # not_dispatched, replay
            reran.append(seq)
            why[seq] = (
                "resumes"
                if verdict.reason == "batch_resumes"
                else "replay"
                if verdict.verdict == c.REPLAY
                else "not_started"
            )

    if agent:
        # Steps the chain planned that its last run did not hold yet: still the agent's to plan again.
        for r in (source.carry or {}).get("rerun", []):
            if isinstance(r, dict) and r.get("seq") not in by_seq and r.get("seq") not in reran:
                reran.append(r["seq"])
                why[r["seq"]] = r.get("why") or "not_started"
        reran.sort()
    declared = {
        str(seq): {k: v for k, v in outcome.items() if k in ("decided_by", "note", "at")}
        for seq, outcome in performed.items()
    }
    # Nested steps whose parent is carried or runs again (a resumed subagent or
    # batch, or a parent never checkpointed) keep their finished work: it is
    # not redone. A batch item also keeps a saved failure (it stays failed),
    # takes a person's "performed" decision as its result, and is dropped by
    # its mode like a top-level step.
    carried_seqs = {s.seq for s, _ in carried} | {s.seq for s, _ in noticed} | {s.seq for s in failed_copies}
    resuming = set(reran) | {s.parent_seq for s in steps if s.parent_seq is not None and s.parent_seq not in by_seq}
    nested = []
    for s in steps:
        if s.parent_seq is None or s.parent_seq not in carried_seqs | resuming:
            continue
        item = s.parent_seq in resuming and tool_at(s.parent_seq) == FOREACH
        verdict = items.get(s.seq)
        # A failed batch that a person asked to retry retries its failed items.
        retried = s.parent_seq in by_seq and by_seq[s.parent_seq].phase == "failed"
        if s.phase == "completed":
            nested.append((s, s.result, "completed"))
        elif (item or agent) and s.phase == "failed" and not retried:
            nested.append((s, s.result, "failed"))
        elif item and s.seq in performed:
            nested.append((s, performed[s.seq], "completed"))
        elif item and s.seq not in rerun and verdict is not None and verdict.verdict == c.DROP:
            dropped.append({"seq": s.seq, "parent_seq": s.parent_seq, "tool": s.tool, "reason": verdict.detail})

    # A person's statement stays a statement on every later run of the chain: a step carried again that a
    # person declared performed (in an earlier run) is never turned into a "saved result" one hop later.
    earlier = (source.carry or {}).get("declared") or {}
    kept = {str(s.seq) for s, _ in carried} | {str(s.seq) for s, _, phase in nested if phase == "completed"}
    declared = {**{k: v for k, v in earlier.items() if k in kept}, **declared}
    carry = {
        "dropped": dropped,
        "reason": reason,
        # Why each step runs again ("replay", "not_started", "retry", "decided", "continue_now", "follow-up"),
        # and the steps a person declared performed: no saved result exists for those.
        "rerun": [{"seq": seq, "why": why.get(seq, rerun_why)} for seq in reran],
        "declared": declared,
    }
    if agent:
        carry["notices"] = [
            {
                "seq": step.seq,
                "parent_seq": step.parent_seq,
                "tool": step.tool,
                "args": step.args,
                "decision": said.get("decision"),
                "decided_by": said.get("decided_by") or None,
                "decided_at": said.get("decided_at"),
                "note": said.get("note") or "",
            }
            for step, said in sorted(noticed, key=lambda n: n[0].seq)
        ]
        for notice in carry["notices"]:
            notice["text"] = notice_text(notice)  # what the agent's model is told (recovery.words.agent_runs)
    if held_by_worker(source.task):
        # The worker holding the workspace compares it before the continuation runs anything (its claim hands it
        # the manifest); what a person declared a step wrote is that step's effect there too.
        explained = workspaces.declared_by(by_seq, declared_effects)
        carry["validate"] = True
        carry["explained"] = {"paths": sorted(explained.paths), "all": explained.everything}
    found = workspaces.admission_check(source=source, declared=workspaces.declared_by(by_seq, declared_effects))
    if found is not None:
        return continuation_refuse(source=source, actor=actor, reason=reason, carry=carry, found=found)
    run = run_enqueue(
        task=source.task,
        actor=actor,
        input=source.input,
        continues=source,
        carry=carry,
        payload={"reason": reason},
    )
    workspaces.record_declared(source=source, steps=by_seq, performed=declared_effects)
    copies = [step_copy(step, run, now, phase="completed", result=result) for step, result in carried]
    for step in failed_copies:
        copies.append(step_copy(step, run, now, phase="failed", result=step.result, error=step.error))
    for step, _ in noticed:
        # The notice stands in for a result: the copy holds no result and is never run again.
        copies.append(step_copy(step, run, now, phase="completed", result=None))
    Step.objects.bulk_create(copies)
    if nested:
        parents = {s.seq: s for s in Step.objects.filter(run=run, seq__in=carried_seqs)}
        Step.objects.bulk_create(
            [
                step_copy(
                    s,
                    run,
                    now,
                    phase=phase,
                    result=result,
                    error=s.error if phase == "failed" else "",
                    parent=parents.get(s.parent_seq),
                )
                for s, result, phase in nested
            ]
        )
    waiting = MESSAGES.move_all(
        Message.objects.filter(task_id=run.task_id).order_by("created_at", "id"),
        MessageStatus.ADMITTED,
        expect=MessageStatus.WAITING,
        run=run,
        waiting_reason="",
    )
    if waiting:
        event_append(
            org_id=run.org_id,
            task_id=run.task_id,
            run_id=run.pk,
            kind="messages_admitted",
            actor=actor,
            payload={"messages": waiting},
        )
    event_append(
        org_id=run.org_id,
        task_id=run.task_id,
        run_id=run.pk,
        kind="run_continued",
        actor=actor,
        payload={
            "continues": source.pk,
            "reason": reason,
            "reused": sorted(carried_seqs | {s.seq for s, _, phase in nested if phase == "completed"}),
            "rerun": reran,
            "dropped": [d["seq"] for d in dropped],
            "performed": sorted(performed),
            **({"notices": [{"seq": s.seq, "decision": n.get("decision")} for s, n in noticed]} if agent else {}),
        },
    )
    return run


def step_copy(step: Step, run: Run, now, *, phase: str, result, error: str = "", parent: Step | None = None) -> Step:
    """A step carried into `run` (a nested one under its carried `parent`): it points at the step that ran, and
    costs nothing again."""
    return Step(
        run=run,
        seq=step.seq,
        parent=parent,
        parent_seq=step.parent_seq,
        tool=step.tool,
        args=step.args,
        recovery_mode=step.recovery_mode,
        phase=phase,
        result=result,
        error=error,
        usage=0,
        reused_from=step.reused_from or step,
        planned_at=step.planned_at,
        dispatched_at=step.dispatched_at or now,
        completed_at=step.completed_at or now,
    )


def continuation_refuse(*, source: Run, actor, reason: str, carry: dict, found) -> Run:
    """The continuation's run, created and ended `failed` (never started) because the workspace no longer matches
    its manifest (`found`, from `workspaces.admission_check`), and the action listing each file."""
    diffs, rows, checked, disk = found
    task = Task.objects.select_related("org", "agent").get(pk=source.task_id)
    evidence = workspaces.evidence_for(task, diffs, rows, source=source, checked=checked, disk=disk)
    detail = workspaces.summary(diffs)
    run = run_enqueue(
        task=task,
        actor=actor,
        input=source.input,
        continues=source,
        carry={**carry, "refused": WORKSPACE_VALIDATION_FAILED},
        payload={"reason": reason},
    )
    run = run_end(
        run,
        RunStatus.FAILED,
        actor=actor,
        kind="run_refused",
        payload={"error_code": WORKSPACE_VALIDATION_FAILED, "reason": reason, "files": len(diffs)},
        expect=RunStatus.QUEUED,
        error_code=WORKSPACE_VALIDATION_FAILED,
        error_detail=detail,
        finished_at=timezone.now(),
    )
    run = Run.objects.select_related("task").get(pk=run.pk)
    action = action_open(
        run=run,
        kind=ActionKind.WORKSPACE_VALIDATION,
        cause=WORKSPACE_VALIDATION_FAILED,
        evidence=evidence,
        recovery_owner="role:admin",
        actor=actor,
    )
    detail = f"{detail} Recovery action #{action.pk} lists them; it never started."
    Run.objects.filter(pk=run.pk).update(error_detail=detail)
    run.error_detail = detail
    return run
