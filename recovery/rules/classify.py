"""Pure: a run's saved steps in, a diagnosis out. No ORM in here.

Fail closed: a checkpoint that contradicts itself, or anything this module does
not understand, is `corrupt` and nothing of it is replayed.
"""

from dataclasses import dataclass, field
from datetime import datetime

from recovery.humanize import args_text
from recovery.rules import batches
from tasks.batches import FOREACH, item_args, item_position, parent_of, parse_batch

REUSE = "reuse"
NOT_DISPATCHED = "not_dispatched"
REPLAY = "replay"
UNKNOWN_OUTCOME = "unknown_outcome"
DROP = "drop"
CORRUPT = "corrupt"

AUTO_RESUMABLE = "auto_resumable"
NEEDS_DECISION = "needs_decision"
EXHAUSTED = "exhausted"
NONE = "none"

PHASES = ("planned", "dispatched", "completed", "failed")
MODES = ("replay", "notify", "forget")
CHAIN_MAX_RUNS = 32

# Recovery is unavailable for these: nothing can be continued; what remains is
# a fresh start (start over) or cancelling.
UNAVAILABLE = ("checkpoint_purged", "checkpoint_too_large", "agent_missing", "tool_unknown")
# Causes of an action no attempt can get past: what remains is Start over, a cancel, or closing the task.
# `diverged`: an agent took another path on replay; continuing would replay into the same fork.
# The action kinds about a workspace (recovery.models.ActionKind): an admin repairs them; they never age or retry.
WORKSPACE_KINDS = ("workspace_validation", "workspace_export")
NOT_RECOVERABLE = ("corrupt_checkpoint", "diverged", *UNAVAILABLE)


@dataclass(frozen=True)
class StepFacts:
    seq: int
    tool: str
    args: object
    phase: str
    recovery_mode: str
    parent_seq: int | None = None
    has_result: bool = False
    result_readable: bool = True
    dispatched_at: datetime | None = None
    completed_at: datetime | None = None
    reused: bool = False
    error: str = ""


@dataclass(frozen=True)
class RunFacts:
    run_id: int
    status: str
    plan: object
    steps: tuple[StepFacts, ...]
    chain_length: int = 1
    # seq -> how many earlier runs of the chain left this operation dispatched without a result
    earlier_interruptions: dict = field(default_factory=dict)
    recovery_disabled: str = ""
    # Steps an earlier continuation dropped by their mode: absent on purpose, not a gap.
    dropped: tuple[int, ...] = ()
    # Set when retention purged the run's checkpoints (why and when, in words).
    checkpoint_purged: str = ""
    # What exists now, to tell whether the rest of the plan can still run: the
    # tools the worker knows and the organization's agents (None: not checked).
    known_tools: frozenset | None = None
    agents: frozenset | None = None
    # `plan` (a scripted plan, numbered by it) or `agent` (an AI agent numbers its steps as it goes).
    kind: str = "plan"
    # Top-level steps the chain planned that this run may plan again (not carried in): not a gap.
    pending: tuple[int, ...] = ()


@dataclass(frozen=True)
class Reason:
    code: str
    detail: str
    seq: int | None = None

    def as_dict(self) -> dict:
        d = {"code": self.code, "detail": self.detail}
        if self.seq is not None:
            d["seq"] = self.seq
        return d


@dataclass(frozen=True)
class StepVerdict:
    seq: int
    tool: str
    verdict: str
    reason: str
    detail: str
    parent_seq: int | None = None

    def as_dict(self) -> dict:
        return {
            "seq": self.seq,
            "tool": self.tool,
            "verdict": self.verdict,
            "reason": self.reason,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class Diagnosis:
    disposition: str
    steps: tuple[StepVerdict, ...]
    reasons: tuple[Reason, ...]

    def as_dict(self) -> dict:
        return {
            "disposition": self.disposition,
            "steps": [s.as_dict() for s in self.steps],
            "reasons": [r.as_dict() for r in self.reasons],
        }

    def verdict_of(self, seq: int) -> str | None:
        return next((s.verdict for s in self.steps if s.seq == seq and s.parent_seq is None), None)


def _args_text(args) -> str:
    # Arguments inside a sentence are said in words (recovery.words), never as JSON; the step's fold has them whole.
    return args_text(args)


def _verdict(step: StepFacts) -> StepVerdict:
    def v(verdict, reason, detail):
        return StepVerdict(step.seq, step.tool, verdict, reason, detail, step.parent_seq)

    if step.phase not in PHASES:
        return v(CORRUPT, "unknown_phase", f"Step {step.seq} has an unreadable phase {step.phase!r}.")
    if step.recovery_mode not in MODES:
        return v(CORRUPT, "unknown_mode", f"Step {step.seq} has an unreadable recovery mode {step.recovery_mode!r}.")
    if not isinstance(step.args, dict) or not step.result_readable:
        return v(CORRUPT, "unreadable_payload", f"Step {step.seq}'s saved payload cannot be read.")
    if step.has_result and step.phase in ("planned", "dispatched"):
        return v(CORRUPT, "result_without_completion", f"Step {step.seq} has a result but was never completed.")
    if step.phase in ("completed", "failed") and step.dispatched_at is None:
        return v(CORRUPT, "result_without_dispatch", f"Step {step.seq} completed but its dispatch was never recorded.")
    if step.phase == "dispatched" and step.dispatched_at is None:
        return v(CORRUPT, "dispatch_unrecorded", f"Step {step.seq} is dispatched with no dispatch time.")
    if step.phase == "completed":
        detail = "Saved result is kept; the step is not run again."
        return v(REUSE, "reused" if step.reused else "completed", detail)
    if step.phase == "failed":
        return v(REUSE, "failed", f"The saved failure is kept: {step.error or 'no detail'}.")
    if step.phase == "planned":
        return v(NOT_DISPATCHED, "not_dispatched", "Planned but never dispatched: it runs with a fresh identity.")
    args = _args_text(step.args)
    if step.recovery_mode == "replay":
        return v(REPLAY, "replay_safe", f"{step.tool} was dispatched and left no result; its mode runs it again.")
    if step.recovery_mode == "notify":
        return v(
            UNKNOWN_OUTCOME,
            "unknown_outcome",
            f"{step.tool} with {args} was dispatched and no result was saved: it may or may not have happened.",
        )
    return v(DROP, "forget", f"{step.tool} was dispatched and left no result; its recovery mode drops it.")


def _planned_tool(planned) -> str:
    return str(planned.get("tool")) if isinstance(planned, dict) else "something unreadable"


def _contradictions(facts: RunFacts) -> list[Reason]:
    """Checkpoint-level contradictions: gaps, order, and disagreement with the plan.

    An agent run has no plan to disagree with, and its calls may finish out of order (one model turn's calls
    run together; a replayed turn runs after later calls it carried): only its numbering is checked.
    """
    reasons = []
    agent = facts.kind == "agent"
    plan_steps = facts.plan.get("steps") if isinstance(facts.plan, dict) else None
    if agent:
        plan_steps = None
    elif not isinstance(plan_steps, list):
        return [Reason("unreadable_plan", "The run's saved plan cannot be read.")]
    top = [s for s in facts.steps if s.parent_seq is None]
    seqs = sorted(s.seq for s in top)
    if len(set(seqs)) != len(seqs):
        reasons.append(Reason("duplicate_seq", "Two checkpoints claim the same step number."))
    dropped = (set(facts.dropped) | set(facts.pending)) - set(seqs)
    accounted = sorted(set(seqs) | {d for d in dropped if d <= (max(seqs) if seqs else 0)})
    expected = list(range(1, len(accounted) + 1))
    if accounted != expected:
        missing = sorted(set(range(1, (max(seqs) if seqs else 0) + 1)) - set(seqs) - dropped)
        first = missing[0] if missing else None
        reasons.append(Reason("seq_gap", f"Checkpoints skip step {first}; steps must be recorded in order.", first))
    for s in top if plan_steps is not None else ():
        if s.seq > len(plan_steps):
            reasons.append(
                Reason("step_not_in_plan", f"Step {s.seq} is beyond the plan's {len(plan_steps)} steps.", s.seq)
            )
        else:
            planned = plan_steps[s.seq - 1]
            if not isinstance(planned, dict) or planned.get("tool") != s.tool:
                reasons.append(
                    Reason(
                        "plan_mismatch",
                        f"Step {s.seq} ran {s.tool} but the plan says {_planned_tool(planned)}.",
                        s.seq,
                    )
                )
    # One sweep from the last step down, keeping the earliest completion seen
    # among later steps: n log n instead of comparing every pair.
    earliest_later: tuple | None = None  # (completed_at, seq)
    for s in sorted(top, key=lambda s: s.seq, reverse=True) if not agent else ():
        if s.dispatched_at is not None and earliest_later is not None and earliest_later[0] < s.dispatched_at:
            reasons.append(
                Reason(
                    "dispatch_after_later_completion",
                    f"Step {s.seq} was dispatched after step {earliest_later[1]} had already completed.",
                    s.seq,
                )
            )
        if s.completed_at is not None and (earliest_later is None or s.completed_at < earliest_later[0]):
            earliest_later = (s.completed_at, s.seq)
    parents = {s.seq for s in facts.steps}
    for s in facts.steps:
        # A reused nested call may wait for its parent to be planned again.
        if s.parent_seq is not None and s.parent_seq not in parents and not s.reused:
            reasons.append(
                Reason("orphan_step", f"Step {s.seq} names a parent step {s.parent_seq} that is missing.", s.seq)
            )
    return reasons + (_item_contradictions(facts, plan_steps) if plan_steps is not None else [])


def _batch(args):
    try:
        return parse_batch(args)
    except ValueError:
        return None


def _item_contradictions(facts: RunFacts, plan_steps: list) -> list[Reason]:
    """A saved item of a top-level batch must be the call its batch asks for at its position."""
    by_seq = {s.seq: s for s in facts.steps}
    reasons = []
    for s in facts.steps:
        if s.parent_seq is None or not isinstance(s.args, dict):
            continue
        parent = by_seq.get(s.parent_seq)
        if parent is not None:
            if parent.parent_seq is not None:
                continue  # under a nested group: not a recovery checkpoint of its own
            tool, args = parent.tool, parent.args
        elif 1 <= s.parent_seq <= len(plan_steps) and isinstance(plan_steps[s.parent_seq - 1], dict):
            tool, args = plan_steps[s.parent_seq - 1].get("tool"), plan_steps[s.parent_seq - 1].get("args")
        else:
            continue
        if tool != FOREACH:
            continue
        batch = _batch(args)
        position = item_position(s.seq, s.parent_seq)
        if batch is None or not 1 <= position <= len(batch.items):
            reasons.append(
                Reason(
                    "item_not_in_batch",
                    f"Step {s.seq} is saved as item {position} of step {s.parent_seq}, "
                    "but that batch has no such item.",
                    s.seq,
                )
            )
        elif s.tool != batch.tool or s.args != item_args(batch, position):
            reasons.append(
                Reason(
                    "item_mismatch",
                    f"Item {position} of step {s.parent_seq} ran {s.tool} with {_args_text(s.args)}, but the batch "
                    f"asks for {batch.tool} with {_args_text(item_args(batch, position))}.",
                    s.seq,
                )
            )
    return reasons


def _subagent_verdicts(facts: RunFacts, verdicts: list[StepVerdict]) -> list[StepVerdict]:
    """A cut-off subagent is judged by its own checkpointed calls, not as one opaque call.

    If none of its nested calls has an unknown outcome, it resumes under its own
    identity: completed nested calls are reused and the rest run. Otherwise the
    decision is about the nested call that was cut off.
    """
    steps = {s.seq: s for s in facts.steps}
    children: dict[int, list[StepVerdict]] = {}
    for v in verdicts:
        if v.parent_seq is not None:
            children.setdefault(v.parent_seq, []).append(v)
    out = []
    for v in verdicts:
        step = steps.get(v.seq)
        if (
            v.parent_seq is None
            and step is not None
            and step.tool == "subagent"
            and step.phase == "dispatched"
            and step.recovery_mode in ("notify", "replay")
            and not any(k.verdict == CORRUPT for k in children.get(v.seq, []))
        ):
            kids = children.get(v.seq, [])
            agent = step.args.get("agent", "?") if isinstance(step.args, dict) else "?"
            unknown = [k for k in kids if k.verdict == UNKNOWN_OUTCOME]
            if unknown:
                k = unknown[0]
                nested = steps[k.seq]
                v = StepVerdict(
                    v.seq,
                    v.tool,
                    UNKNOWN_OUTCOME,
                    "unknown_outcome",
                    f"Subagent {agent} was cut off in its nested {nested.tool} (step {k.seq}) with "
                    f"{_args_text(nested.args)}: it may or may not have happened.",
                )
            else:
                done = sum(1 for k in kids if k.verdict == REUSE)
                v = StepVerdict(
                    v.seq,
                    v.tool,
                    REPLAY,
                    "subagent_resumes",
                    f"Subagent {agent} resumes under its own identity: {done} completed nested call(s) are "
                    "reused, the rest run.",
                )
        out.append(v)
    return out


def _judged_batches(verdicts) -> dict[int, list[StepVerdict]]:
    """Top-level foreach steps cut off (dispatched, mode replay or notify): seq → their saved items.

    Such a batch is judged item by item. A foreach nested in another group is
    not: it is one call of that group and is retried as a whole by its mode.
    """
    items: dict[int, list[StepVerdict]] = {}
    for v in verdicts:
        if v.parent_seq is not None:
            items.setdefault(v.parent_seq, []).append(v)
    return {
        v.seq: items.get(v.seq, [])
        for v in verdicts
        if v.parent_seq is None
        and v.tool == FOREACH
        and v.verdict in (REPLAY, UNKNOWN_OUTCOME)
        and not any(k.verdict == CORRUPT for k in items.get(v.seq, []))
    }


def batch_states(facts: RunFacts, seq: int, items: list[StepVerdict]) -> list[str]:
    """One state per item of the batch at step `seq` (recovery.rules.batches)."""
    step = next((s for s in facts.steps if s.seq == seq and s.parent_seq is None), None)
    batch = _batch(step.args) if step is not None else None
    saved = {item_position(k.seq, seq): batches.item_state(k.verdict, k.reason) for k in items}
    total = len(batch.items) if batch is not None else max(saved, default=0)
    dropped = [item_position(d, seq) for d in facts.dropped if parent_of(d) == seq]
    return batches.item_states(total, saved, dropped)


def _batch_verdicts(facts: RunFacts, verdicts: list[StepVerdict]) -> list[StepVerdict]:
    """A cut-off top-level batch is judged by its items, one by one.

    Saved items are kept (a failure stays failed), items never dispatched run,
    a dispatched item without result follows its own mode. Only an item of
    unknown outcome makes the batch wait for a decision, and the decision is
    about that item.
    """
    judged = _judged_batches(verdicts)
    steps = {s.seq: s for s in facts.steps}
    out = []
    for v in verdicts:
        if v.parent_seq is None and v.seq in judged:
            items = judged[v.seq]
            summary = batches.batch_summary(batch_states(facts, v.seq, items))
            unknown = [k for k in items if k.verdict == UNKNOWN_OUTCOME]
            if unknown:
                item = steps[unknown[0].seq]
                v = StepVerdict(
                    v.seq,
                    v.tool,
                    UNKNOWN_OUTCOME,
                    "unknown_outcome",
                    f"Item {item_position(item.seq, v.seq)} of the batch, {item.tool} with {_args_text(item.args)}, "
                    f"was dispatched and no result was saved: it may or may not have happened. The batch: {summary}.",
                )
            else:
                v = StepVerdict(v.seq, v.tool, REPLAY, "batch_resumes", f"The batch resumes: {summary}.")
        out.append(v)
    return out


def _unavailable(facts: RunFacts, verdicts) -> list[Reason]:
    """What the rest of the plan needs and no longer exists: a tool the worker does not know now, an agent.

    A tool counts as changed only when the saved steps prove it existed: a step
    of this chain completed with it. A tool that never ran is not claimed to
    have changed (the worker would refuse it as it would have before).
    """
    reasons: list[Reason] = []
    seen: set[tuple[str, str]] = set()
    used = {s.tool for s in facts.steps if s.phase == "completed"}

    def tool_needed(tool, seq: int, where: str) -> None:
        if facts.known_tools is None or tool in facts.known_tools or tool not in used or ("tool", tool) in seen:
            return
        seen.add(("tool", tool))
        reasons.append(
            Reason(
                "tool_unknown",
                f"{where} calls {tool}, which this run used but the worker does not know now: the tool set "
                "changed since the run.",
                seq,
            )
        )

    def agent_needed(name, seq: int, where: str) -> None:
        if facts.agents is None or name in facts.agents or ("agent", str(name)) in seen:
            return
        seen.add(("agent", str(name)))
        reasons.append(Reason("agent_missing", f"{where} agent {name}, which no longer exists.", seq))

    if facts.kind == "agent":
        # No plan says what comes next: the calls that run again are those cut off or never dispatched.
        for v in verdicts:
            if v.verdict in (REPLAY, NOT_DISPATCHED):
                tool_needed(v.tool, v.seq, f"Step {v.seq}")
        return reasons
    top = {v.seq: v for v in verdicts if v.parent_seq is None}
    for seq, planned in enumerate(facts.plan.get("steps") or [], start=1):
        v = top.get(seq)
        if seq in facts.dropped or (v is not None and v.verdict in (REUSE, DROP)) or not isinstance(planned, dict):
            continue  # kept or dropped: it does not run again
        tool, args = planned.get("tool"), planned.get("args") or {}
        tool_needed(tool, seq, f"Step {seq}")
        if tool == FOREACH and (batch := _batch(args)) is not None:
            tool_needed(batch.tool, seq, f"Each item of step {seq}")
        elif tool == "subagent" and isinstance(args, dict):
            agent_needed(args.get("agent"), seq, f"Step {seq} delegates to")
            inner = args.get("input")
            for call in inner.get("steps") or [] if isinstance(inner, dict) else []:
                if isinstance(call, dict):
                    tool_needed(call.get("tool"), seq, f"The subagent of step {seq}")
    return reasons


def classify(facts: RunFacts) -> Diagnosis:
    verdicts = [_verdict(s) for s in sorted(facts.steps, key=lambda s: (s.parent_seq or 0, s.seq))]
    verdicts = tuple(_batch_verdicts(facts, _subagent_verdicts(facts, verdicts)))
    if facts.status not in ("interrupted", "stopped"):
        return Diagnosis(NONE, verdicts, ())

    if facts.checkpoint_purged:  # nothing saved is left to judge
        return Diagnosis(NEEDS_DECISION, verdicts, (Reason("checkpoint_purged", facts.checkpoint_purged),))
    reasons: list[Reason] = []
    corrupt = [v for v in verdicts if v.verdict == CORRUPT]
    contradictions = _contradictions(facts)
    if corrupt or contradictions:
        reasons += [Reason(v.reason, v.detail, v.seq) for v in corrupt] + contradictions
        return Diagnosis(CORRUPT, verdicts, tuple(reasons))

    if facts.recovery_disabled:
        return Diagnosis(NEEDS_DECISION, verdicts, (Reason("checkpoint_too_large", facts.recovery_disabled),))
    unavailable = _unavailable(facts, verdicts)
    if unavailable:
        return Diagnosis(NEEDS_DECISION, verdicts, tuple(unavailable))

    by_seq = {s.seq: s for s in facts.steps}
    top = [v for v in verdicts if v.parent_seq is None]
    judged = _judged_batches(verdicts)
    # A verified stop (Stop, a pause, the budget: the run ended `stopped`, with a receipt) is not an
    # interruption: what it left dispatched counts against no bound. Only a run cut off counts.
    cut_off = facts.status == "interrupted"
    for v in top if cut_off else ():
        if v.seq in judged:
            continue  # a batch is bounded item by item: progress across runs is not a repeat
        if v.verdict in (REPLAY, UNKNOWN_OUTCOME, DROP) and facts.earlier_interruptions.get(v.seq, 0) >= 1:
            reasons.append(
                Reason(
                    "interrupted_twice",
                    f"Step {v.seq} ({v.tool}) was interrupted in an earlier run of this chain too; "
                    "it is not retried automatically again.",
                    v.seq,
                )
            )
    for parent, items in judged.items() if cut_off else ():
        for k in items:
            if k.verdict in (REPLAY, UNKNOWN_OUTCOME, DROP) and facts.earlier_interruptions.get(k.seq, 0) >= 1:
                reasons.append(
                    Reason(
                        "interrupted_twice",
                        f"Item {item_position(k.seq, parent)} of step {parent} ({k.tool}) was interrupted in an "
                        "earlier run of this chain too; it is not retried automatically again.",
                        k.seq,
                    )
                )
    if facts.chain_length >= CHAIN_MAX_RUNS:
        reasons.append(
            Reason(
                "chain_exhausted",
                f"This chain already holds {facts.chain_length} runs (verified stops not counted), the most it may.",
            )
        )
    if reasons:
        return Diagnosis(EXHAUSTED, verdicts, tuple(reasons))

    for v in top:
        step = by_seq[v.seq]
        if v.verdict == UNKNOWN_OUTCOME and v.seq in judged:
            # The decision is about the item: its own seq, tool and arguments.
            item = next(k for k in judged[v.seq] if k.verdict == UNKNOWN_OUTCOME)
            reasons.append(Reason("unknown_outcome", v.detail, item.seq))
        elif v.verdict == UNKNOWN_OUTCOME and step.tool == "subagent":
            reasons.append(Reason("unknown_outcome", v.detail, v.seq))  # names the nested call
        elif v.verdict == UNKNOWN_OUTCOME:
            reasons.append(
                Reason(
                    "unknown_outcome",
                    f"{step.tool} with {_args_text(step.args)} was dispatched and no result was saved.",
                    v.seq,
                )
            )
        elif v.verdict == REUSE and v.reason == "failed" and facts.kind != "agent":
            # (An agent run's failed call is a result the agent already received: it is carried as it is.)
            reasons.append(
                Reason("step_failed", f"Step {v.seq} ({v.tool}) failed: {step.error or 'no detail'}.", v.seq)
            )
    # A nested call of unknown outcome parks its parent as well (a subagent says so itself).
    undecided_parents = {v.seq for v in top if v.verdict == UNKNOWN_OUTCOME}
    for v in verdicts:
        if v.parent_seq is not None and v.verdict == UNKNOWN_OUTCOME and v.parent_seq not in undecided_parents:
            step = by_seq[v.seq]
            reasons.append(
                Reason(
                    "unknown_outcome",
                    f"Nested {step.tool} (under step {v.parent_seq}) was dispatched and no result was saved.",
                    v.seq,
                )
            )
    if reasons:
        return Diagnosis(NEEDS_DECISION, verdicts, tuple(reasons))
    return Diagnosis(AUTO_RESUMABLE, verdicts, ())
