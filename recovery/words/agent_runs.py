"""Agent runs in words (DESIGN §13): calls, notices, the tool catalogue, usage, the prompt, diverged calls."""

import json

from recovery.words.lines import At, Line, Said, said_part
from recovery.words.runs import StepRow

UNKNOWN_OUTCOME_CHOICES = {"ask_person": "Ask a person", "tell_agent": "Tell the agent"}
UNKNOWN_OUTCOME_MEANS = (
    "Ask a person: the card waits for someone to decide. Tell the agent: with no person, the agent gets a notice "
    "that the call's outcome is unknown and verifies the current state before repeating it."
)
SETTING_WORDS = "unknown outcomes: tell the agent"


def call_text(tool: str, args, limit: int = 160) -> str:
    """A call as people and models read it: `file_write(path="notes.md", content="# Rep…")`, cut at `limit`."""

    parts = []
    for key, value in (args or {}).items() if isinstance(args, dict) else ():
        try:
            shown = json.dumps(value, ensure_ascii=False, sort_keys=True)
        except (TypeError, ValueError):
            shown = repr(value)
        parts.append(f"{key}={shown if len(shown) <= 60 else shown[:57] + '…'}")
    text = f"{tool}({', '.join(parts)})"
    return text if len(text) <= limit else text[: limit - 2] + "…)"


def notice_text(notice: dict) -> str:
    """The sentence an agent's model is given instead of a result (API.md, Agent runs: notices)."""
    call = call_text(notice.get("tool") or "?", notice.get("args"))
    decision = notice.get("decision")
    if decision == "performed":
        note = (notice.get("note") or "").strip()
        who = notice.get("decided_by") or "someone"
        return f"A person ({who}) recorded that this call ({call}) happened" + (f": {note}" if note else ".")
    if decision == "dropped":
        return (
            f"This call ({call}) was interrupted and dropped by its recovery mode; it may or may not have happened "
            "and it is not run again unless you ask for it anew."
        )
    return (
        f"This call ({call}) was interrupted and its outcome is unknown; verify the current state before repeating it."
    )


def notice_row(notice: dict) -> "StepRow":
    """A step the agent got a notice for, on the run page: who settled it and what the model was told."""
    decision = notice.get("decision")
    told = ("; the model was told: ", Said(notice_text(notice)))
    if decision == "performed":
        by = notice.get("decided_by") or "someone"
        return StepRow("marked performed", (f"marked performed by {by}", *said_part(notice.get("note") or ""),
                                            " — no saved result", *told), declared=True)  # fmt: skip
    # (No notice is a saved result: the row shows neither a result nor a duration.)
    if decision == "dropped":
        return StepRow("dropped", ("forget mode: not run again", *told), declared=True)
    if notice.get("decided_by"):
        who = f"handed to the agent to verify by {notice['decided_by']}"
        return StepRow("agent verifies", (who, *told), declared=True)
    who = f"handed to the agent to verify by its setting ({SETTING_WORDS})"
    return StepRow("agent verifies", (who, *told), declared=True)


def catalogue_line(catalogue: dict | None, registered_at) -> Line:
    """Where an agent's tool list comes from, on its settings."""
    if catalogue is None:
        return ("Its worker has registered no tool catalogue: the built-in tools and their default modes apply.",)
    n = len(catalogue)
    return (f"{n} tool{'s' if n != 1 else ''} registered by its worker ", At(registered_at), "; model turns are "
            "always replayed.")  # fmt: skip


def usage_line(usage) -> Line | None:
    """What a run's steps cost, and what recovery reused or spent again (tokens where reported, else units)."""
    if usage is None or not (usage.spent or usage.reused):
        return None
    line = f"Spent {usage.spent:,}"
    if usage.reused:
        line += f"; reused {usage.reused:,} from earlier runs of the chain (not spent again)"
    if usage.spent_again:
        steps = " and ".join(f"step {s}" for s in usage.again_steps) or "steps"
        line += f"; {usage.spent_again:,} of it spent again on {steps}, cut off in an earlier run and run again"
    return (line + " (tokens where the steps report tokens, else units).",)


def prompt_line(run) -> Line | None:
    """An agent run's prompt, as the person wrote it."""
    prompt = (run.input or {}).get("prompt") if isinstance(run.input, dict) else None
    if not isinstance(prompt, str):
        return None
    return ("Prompt: ", Said(prompt if len(prompt) <= 2000 else prompt[:1999] + "…"))


def output_heading(run) -> str:
    return f"What the agent returned in run #{run.pk}"


def diverged_calls(evidence: dict) -> list[dict]:
    """The two calls of a diverged step, side by side: what was saved and what the agent asked for now."""
    out = []
    for side, label in (("saved", "Saved (what the earlier run called)"), ("asked", "Asked now (on replay)")):
        call = evidence.get(side) or {}
        out.append({"side": side, "label": label, "tool": call.get("tool") or "?", "args": call.get("args") or {},
                    "text": call_text(call.get("tool") or "?", call.get("args"))})  # fmt: skip
    return out


def diverged_summary(evidence: dict) -> Line:
    saved, asked = evidence.get("saved") or {}, evidence.get("asked") or {}
    seq = evidence.get("seq")
    same_tool = saved.get("tool") == asked.get("tool")
    differs = (
        "the same tool with other arguments" if same_tool else f"{asked.get('tool')} instead of {saved.get('tool')}"
    )
    return (f"At step {seq} the agent asked for {differs}. Nothing of the new path ran; the saved steps are kept.",)
