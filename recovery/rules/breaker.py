"""Pure: the recovery breaker's rules (DESIGN §14). Plain data in, a decision out; no Django.

A failure signature names how a run failed, so that one bad deploy or one provider outage is seen as one
failure across many tasks. It is the string `"<tool> / <code>"`: `tool` is the tool of the step the run was
cut off at (the last top-level step left dispatched with no result, else the last one that failed, else the
one the diagnosis names), `code` is the run's error code (`lease_lapsed`, a worker's own code) or, when the
run has none, the diagnosis' cause (`unknown_outcome`, `step_failed`, …). With no such step it is the code
alone. The breaker of (organization, agent, signature) opens when more than `threshold` distinct tasks of
that agent opened recovery with that signature within the window.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

OPEN, HALF_OPEN, CLOSED = "open", "half_open", "closed"
IN_FORCE = (OPEN, HALF_OPEN)


@dataclass(frozen=True)
class StepFailure:
    seq: int
    tool: str
    phase: str  # planned | dispatched | completed | failed
    parent_seq: int | None = None


def failure_tool(steps: list[StepFailure], named_seq: int | None = None) -> str:
    """The tool the run failed at: the last top-level step left in flight, else the last that failed, else the
    step the diagnosis names; "" when none."""
    top = sorted((s for s in steps if s.parent_seq is None), key=lambda s: s.seq)
    for phase in ("dispatched", "failed"):
        hit = [s for s in top if s.phase == phase]
        if hit:
            return hit[-1].tool
    named = [s for s in steps if s.seq == named_seq]
    return named[0].tool if named else ""


def failure_signature(*, tool: str, error_code: str, cause: str) -> str:
    code = error_code or cause or "unknown"
    return f"{tool} / {code}" if tool else code


def trips(*, tasks_in_window: int, threshold: int) -> bool:
    """More than `threshold` distinct tasks in the window open the breaker (the `threshold`-th does not)."""
    return tasks_in_window > threshold


def cooled(*, opened_at: datetime, now: datetime, cooloff_seconds: float) -> bool:
    """An open breaker half-opens once its cool-off since it (re)opened has passed."""
    return now >= opened_at + timedelta(seconds=cooloff_seconds)


def after_probe(probe_status: str | None) -> str | None:
    """A half-open breaker after its one trial continuation: closed when the trial succeeded, open again when it
    ended any other way, unchanged (None) while it has not ended or there is none yet."""
    if probe_status == "succeeded":
        return CLOSED
    if probe_status in ("failed", "interrupted", "stopped", "cancelled"):
        return OPEN
    return None


def automatic_admission(*, states: list[str], probe_taken: bool) -> str:
    """What the breakers in force on an agent let an automatic continuation do: "go" (none in force), "probe"
    (every one in force is half-open and its one trial is not taken yet: this continuation is that trial), or
    "hold" (one is open, or the trial is taken)."""
    if not states:
        return "go"
    if all(s == HALF_OPEN for s in states) and not probe_taken:
        return "probe"
    return "hold"


def _span(seconds: float) -> str:
    minutes = int(seconds // 60)
    if minutes < 1:
        return "under a minute"
    if minutes < 120:
        return "1 minute" if minutes == 1 else f"{minutes} minutes"
    hours = minutes // 60
    return f"{hours} hours"


def breaker_sentence(*, agent: str, signature: str, tasks: int, span_seconds: float, state: str) -> str:
    """What a card, the banner and a refused admission say about a breaker in force."""
    tool, _, code = signature.partition(" / ")
    failure = f"`{tool}` / `{code}`" if code else f"`{tool}`"
    noun = "task" if tasks == 1 else "tasks"
    said = f"{tasks} {noun} failed with {failure} in {_span(span_seconds)}"
    if state == HALF_OPEN:
        return f"Automatic recovery paused for {agent}: {said}; one trial continuation may run now."
    return f"Automatic recovery paused for {agent}: {said}."


@dataclass(frozen=True)
class BreakerFacts:
    """A breaker in force on an agent, as the gates and the words read it."""

    breaker_id: int
    agent: str
    signature: str
    tasks: int
    span_seconds: float
    state: str

    def sentence(self) -> str:
        return breaker_sentence(
            agent=self.agent,
            signature=self.signature,
            tasks=self.tasks,
            span_seconds=self.span_seconds,
            state=self.state,
        )
