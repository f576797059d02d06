"""Continue from step k (recovery/actions/continue_from.py): the preview, the run lines, the links both ways.

Pure words over the run's `carry["continued_from"]` and the preview: what was reused, what runs again, and the
consent a person gave. Never "recovered" or "resumed": the new run is a new chain that reuses a saved prefix.
"""


def step_span(seqs) -> str:
    """ "step 4", "steps 1-3", "steps 1-2 and 5" (consecutive runs joined by an en dash)."""
    seqs = sorted(set(seqs))
    if not seqs:
        return "no step"
    parts, start = [], 0
    for i in range(1, len(seqs) + 1):
        if i == len(seqs) or seqs[i] != seqs[i - 1] + 1:
            first, last = seqs[start], seqs[i - 1]
            parts.append(str(first) if first == last else f"{first}\N{EN DASH}{last}")
            start = i
    joined = parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"
    single = len(seqs) == 1
    return f"step{'' if single else 's'} {joined}"


def continued_from_text(carry: dict | None) -> str:
    """How a run started by Continue from step k is named wherever it is shown ("" for any other run), e.g.
    "Continuing from step 4 in run #12 (by olive): steps 1-3 reused, steps 4-5 run again" (with en dashes)."""
    cont = (carry or {}).get("continued_from")
    if not isinstance(cont, dict) or not cont.get("seq"):
        return ""
    by = f" (by {cont['by']})" if cont.get("by") else ""
    reused = cont.get("reused") or []
    again = cont.get("runs_again") or []
    said_reused = f"{step_span(reused)} reused" if reused else "nothing reused"
    said_again = f"{step_span(again)} {'runs' if len(again) == 1 else 'run'} again" if again else "nothing runs again"
    text = f"Continuing from step {cont['seq']} in run #{cont.get('run')}{by}: {said_reused}, {said_again}."
    if cont.get("accepted_duplicate_risk"):
        text += f" Duplicate risk accepted: {cont.get('reason') or 'no reason given'}."
    return text


def continue_from_preview_lines(preview, *, task_status: str = "") -> dict:
    """The preview's sentences (a `recovery.actions.continue_from.Preview`); a done task is reopened by it."""
    risky = preview.side_effects
    again = [s["seq"] for s in preview.runs_again]
    return {
        "title": f"Continue task #{preview.task} from step {preview.seq} of run #{preview.run}",
        "reused": (
            f"Reused from run #{preview.run}: {step_span(preview.reused)}, their saved results; they do not run again."
            if preview.reused
            else "Nothing is reused: every saved step runs again, as in Start over."
        ),
        "runs_again": f"Runs again, fresh: {step_span(again)}.",
        "risk": (
            f"{step_span([s['seq'] for s in risky]).capitalize()} may act outside again (recovery mode notify): "
            "what they did in the saved run may happen twice."
            if risky
            else "None of the steps that run again may act outside (no notify-mode step): no consent is needed."
        ),
        "note": "A new run of the task, not a recovery: the runs before it are no longer recovered."
        + (" The task is done: continuing reopens it." if task_status == "done" else ""),
    }


def continue_from_split_text(seq) -> str:
    """Under a diverged replay: what Continue from the split step does (its preview names every call first)."""
    if not isinstance(seq, int) or seq < 1:
        return ""
    before = f"reuses {step_span(range(1, seq))}" if seq > 1 else "reuses nothing"
    return (
        f"A new run that {before} and lets the agent take step {seq} onward fresh; "
        "the preview lists what runs again first."
    )


def continued_later_text(later) -> str:
    """On a run's page: the run a person started later by Continue from step k of it ("" for none), e.g.
    "Continued from step 4 in run #13" (its step and its number, from the later run's saved carry)."""
    cont = ((getattr(later, "carry", None) or {}) if later is not None else {}).get("continued_from")
    if not isinstance(cont, dict) or not cont.get("seq"):
        return ""
    return f"Continued from step {cont['seq']} in run #{later.pk}"
