"""Runs and steps in words: a run's diagnosis and lines, a step's row, what a continuation carried."""

from dataclasses import dataclass
from datetime import datetime

from recovery import humanize
from recovery.rules import classify as c
from recovery.words.continue_from import continued_from_text
from recovery.words.lines import At, Line, Said, said_part
from recovery.words.task import stopped_line, stopping_line
from recovery.words.vocabulary import DECIDED

DISPOSITION_WORDS = {
    c.NEEDS_DECISION: "Needs a person's decision",
    c.CORRUPT: "The checkpoint contradicts itself; nothing of it is replayed",
    c.EXHAUSTED: "Not retried automatically again",
}


def diagnosis_line(run, diagnosis, *, auto_resume: bool, continued_by=None, refused_by=None) -> Line | None:
    """What will actually happen to an interrupted or stopped run, for this agent and this stop cause."""
    if diagnosis is None or diagnosis.disposition == c.NONE:
        return None
    reasons = "; ".join(r.detail for r in diagnosis.reasons)
    if diagnosis.disposition == c.AUTO_RESUMABLE:
        if run.status == "stopped" and run.stop_reason == "stop":
            head = "Safe to continue — it continues only when someone writes a follow-up (stopped by a person)"
        elif run.status == "stopped" and run.stop_reason in ("paused", "budget"):
            head = "Safe to continue — it continues once, by itself, when the hold lifts"
        elif run.status == "stopped":
            head = "Safe to continue — nothing continues it by itself"
        elif not auto_resume:
            head = "Safe to continue — this agent waits for an operator (auto-resume is off)"
        else:
            head = "Safe to continue automatically"
        if continued_by is not None:
            started = continued_by.started_at is not None
            head += f"; continued in run #{continued_by.pk}" if started else f"; run #{continued_by.pk} is queued"
        elif refused_by is not None:
            # Safe by its checkpoints, but its continuation was refused before it started: never "automatically".
            head = (
                f"Safe to continue by its checkpoints, but its continuation run #{refused_by.pk} was not admitted: "
                "the workspace differs from what the checkpoints recorded"
            )
        return (head + ".",)
    said = DISPOSITION_WORDS.get(diagnosis.disposition, diagnosis.disposition)
    line = f"{said}: {reasons}" if reasons else said + "."
    if continued_by is not None:
        # The question was settled: say where the run went on, never only what it once needed.
        started = continued_by.started_at is not None
        line = line.rstrip(".") + (
            f"; settled — continued in run #{continued_by.pk}."
            if started
            else f"; settled — run #{continued_by.pk} is queued."
        )
    return (line,)


@dataclass
class StepRow:
    label: str
    note: Line | None = None
    declared: bool = False  # a person's statement stands in for the step: it has no saved result


def _settled_in(step, continued_in) -> Line | None:
    """How a step of unknown outcome was settled by the continuation that carries it on (None while undecided)."""
    if continued_in is None:
        return None
    carry = continued_in.carry or {}
    queued = "" if continued_in.started_at else " (queued)"
    declared = (carry.get("declared") or {}).get(str(step.seq))
    if declared is not None:
        return (
            f"run #{continued_in.pk}{queued} does not run it again: decided it happened — "
            f"{declared.get('decided_by', 'someone')}",
            *said_part(declared.get("note", "")),
        )
    why = {r.get("seq"): r.get("why") for r in carry.get("rerun", []) if isinstance(r, dict)}.get(step.seq)
    said = {
        "decided": "decided: it did not happen",
        "retry": "retry requested",
        "continue_now": "asked for with Continue now",
        "follow-up": "continued by a follow-up",
    }.get(why)
    return (f"run #{continued_in.pk}{queued} runs it again: {said}",) if said else None


def step_row(
    step, *, run, verdict=None, disposition: str | None = None, reused_run_id=None, continued_in=None
) -> StepRow:
    """The label and note of one step on a run card (`continued_in`: the continuation of this run, if any)."""
    carry = run.carry or {}
    # A batch item a person declared performed is keyed by its own (nested) seq.
    declared = (carry.get("declared") or {}).get(str(step.seq))
    if step.reused_from_id and declared is not None:
        return StepRow(
            "marked performed",
            (
                f"marked performed by {declared.get('decided_by', 'someone')}",
                *said_part(declared.get("note", "")),
                " — no saved result",
            ),
            declared=True,
        )
    if step.reused_from_id:
        source = f" of run #{reused_run_id}" if reused_run_id else ""
        return StepRow("reused", (f"reused — saved result{source}",))
    rerun = {r.get("seq"): r.get("why") for r in carry.get("rerun", []) if isinstance(r, dict)}
    why = rerun.get(step.seq) if step.parent_seq is None else None
    # Said only in the run that ran it again, and only once it did.
    again = RERUN_WORDS.get(why) if step.phase in ("dispatched", "completed", "failed") else None
    if verdict is not None and disposition is not None:
        row = _verdict_row(step, verdict, disposition)
        settled = _settled_in(step, continued_in) if verdict.verdict == c.UNKNOWN_OUTCOME else None
        if settled is not None:
            row = StepRow("unknown outcome", settled)
    else:
        label = {"planned": "planned", "dispatched": "running", "completed": "completed", "failed": "failed"}
        row = StepRow(label[step.phase])
        if step.phase == "dispatched" and run.status not in ("running", "stopping"):
            row.label = "cut off"
        if step.phase == "failed":
            row.note = (f"failed: {humanize.error_text(step.error) or 'no detail'}",)
    if again:
        row.note = (again, "; ", *row.note) if row.note else (again,)
    return row


RERUN_WORDS = {
    "replay": "run again (replay)",
    "retry": "run again (retry requested)",
    # Continue now runs a failed step again: a person asked to continue, not for a retry of an action.
    "continue_now": "run again (asked for with Continue now)",
    "decided": "run again (decided: it did not happen)",
    "follow-up": "run again (follow-up)",
    "resumes": "resumed item by item (saved items kept)",
}


def step_mode(planned: str, now: str | None = None) -> str:
    """The recovery mode a step was planned with, and the agent's mode now where a settings change moved it since."""
    return f"planned as {planned} · now {now}" if now and now != planned else planned


def _verdict_row(step, verdict, disposition: str) -> StepRow:
    """A step of an interrupted/stopped run, in words that agree with the run's disposition."""
    v = verdict.verdict
    if v == c.REUSE:
        if step.phase == "failed":
            return StepRow("failed", (f"failed: {humanize.error_text(step.error) or 'no detail'} — kept as failed",))
        return StepRow("completed", ("saved result; a continuation reuses it",))
    if v == c.NOT_DISPATCHED:
        return StepRow("not started", ("planned, never dispatched: a continuation runs it",))
    if v == c.REPLAY:
        if disposition == c.EXHAUSTED:
            return StepRow("cut off", ("replay mode, but interrupted twice: not retried automatically again",))
        if verdict.reason in ("subagent_resumes", "batch_resumes"):
            return StepRow("cut off", (verdict.detail,))
        return StepRow("cut off", ("replay mode: a continuation runs it again",))
    if v == c.UNKNOWN_OUTCOME and step.tool == "foreach" and step.parent_seq is None:
        return StepRow("unknown outcome", (verdict.detail,))  # names the item and says what the batch keeps
    if v == c.UNKNOWN_OUTCOME:
        return StepRow("unknown outcome", ("may or may not have happened: a person decides",))
    if v == c.DROP:
        return StepRow("dropped", ("forget mode: a continuation does not run it",))
    return StepRow("corrupt", (verdict.detail,))


def duration(start: datetime | None, end: datetime | None) -> str:
    if not start or not end:
        return ""
    seconds = max(0.0, (end - start).total_seconds())
    if seconds < 1:
        return f"{int(seconds * 1000)} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{int(seconds // 60)} min {int(seconds % 60)} s"


def fresh_start_text(carry: dict | None) -> str:
    """Pure: how a fresh run is named wherever it is shown ("" for any other run). Never a recovery."""
    fresh = (carry or {}).get("fresh_start")
    if not isinstance(fresh, dict):
        return ""
    after = f" after run #{fresh['after']}" if fresh.get("after") else ""
    by = f" by {fresh['by']}" if fresh.get("by") else ""
    return f"Fresh start{by}{after}: runs the task again from the beginning and reuses nothing."


def continued_by_text(continuation) -> str:
    """Pure: how a run names the run that continues it — "continued by" only once that run has started."""
    if continuation is None:
        return ""
    if continuation.started_at is None:
        return f"continuation run #{continuation.pk} (queued)"
    return f"continued by run #{continuation.pk}"


def run_lines(run, *, auto_resume: bool = True, disposition: str | None = None) -> list[Line]:
    """The sentences under a run's badge: why it stopped or ended, in saved facts."""
    lines: list[Line] = []
    fresh = fresh_start_text(run.carry)
    if fresh:
        lines.append((fresh,))
    continued = continued_from_text(run.carry)
    if continued:
        lines.append((continued,))
    if run.status == "stopping":
        lines.append(stopping_line(run))
    stopped = stopped_line(run, auto_resume=auto_resume, disposition=disposition)
    if stopped:
        lines.append(stopped)
    if run.stop_receipt:
        by = run.stop_receipt.get("by")
        receipts = {
            "worker": "Stop verified: the worker finished with its lease.",
            "lease_lapse": "Stop verified: the worker stopped renewing its lease and it lapsed.",
            "not_started": "Stop verified: no worker had started it.",
        }
        if by in receipts:
            lines.append((receipts[by],))
    if run.status == "interrupted" and run.error_code == "lease_lapsed":
        lines.append((f"Interrupted: {run.error_detail or 'its lease lapsed.'}",))
    elif run.error_code and run.status != "stopped":
        detail = humanize.error_text(run.error_detail)
        lines.append((f"{run.error_code.replace('_', ' ').capitalize()}: {detail}".rstrip(": "),))
    if run.recovery_disabled:
        lines.append((f"Recovery is off for this run: {run.recovery_disabled}",))
    return lines


def carried_lines(decisions, messages) -> list[Line]:
    """What a run carried in: the decisions it acts on and the follow-ups admitted into it."""
    lines: list[Line] = []
    for d in decisions:
        lines.append(
            (
                f"Carries a decision: {DECIDED.get(d.decision, d.decision)} (",
                d.requested_by,
                ", ",
                At(d.requested_at),
                *((": ", Said(d.note)) if d.note else ()),
                ").",
            )
        )
    for m in messages:
        author = m.author.username if getattr(m, "author", None) else "someone"
        body = m.body if len(m.body) <= 200 else m.body[:199] + "…"
        state = {
            "admitted": "handed over when a worker starts it",
            "delivered": "handed over at its claim; its worker has not acknowledged reading it",
            "read": "read by the agent",
            "not_delivered": "not delivered: the task was closed before it was read",
        }.get(m.status, m.status)
        lines.append((f"Carries a follow-up from {author} (", At(m.created_at), "): ", Said(body), f" — {state}."))
    return lines
