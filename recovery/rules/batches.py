"""Pure: what became of each item of a batch (`foreach`), and the sentence that says so.

`item_states` turns the verdicts of a batch's saved items into one state per
item position; `batch_summary` words them, grouping neighbours with the same
state: "items 1-2 reused, item 3 runs again (replay), items 4-5 not started"
(ranges are written with an en dash).
Classification puts the sentence in the diagnosis (and so on the run page and
the card); a presenter may call these directly. No ORM in here.
"""

from collections.abc import Iterable, Mapping, Sequence

REUSED = "reused"
FAILED = "failed"
REPLAY = "replay"
UNKNOWN_OUTCOME = "unknown_outcome"
DROPPED = "dropped"
NOT_STARTED = "not_started"

# How a cut-off batch's items go on in its continuation.
PHRASES = {
    REUSED: "reused",
    FAILED: "failed (the saved failure is kept; not retried)",
    REPLAY: "runs again (replay)",
    UNKNOWN_OUTCOME: "may or may not have happened (unknown outcome)",
    DROPPED: "dropped (its recovery mode forgets it)",
    NOT_STARTED: "not started",
}


def item_state(verdict: str, reason: str = "") -> str:
    """The state of one saved item from its classification verdict (recovery.rules.classify)."""
    if verdict == "reuse":
        return FAILED if reason == "failed" else REUSED
    return {
        "not_dispatched": NOT_STARTED,  # planned, never dispatched: it never ran
        "replay": REPLAY,
        "unknown_outcome": UNKNOWN_OUTCOME,
        "drop": DROPPED,
    }.get(verdict, UNKNOWN_OUTCOME)  # anything not understood is not claimed to be safe


def item_states(total: int, saved: Mapping[int, str], dropped: Iterable[int] = ()) -> list[str]:
    """One state per item position 1..total: `saved` maps a position to its state; `dropped` are
    positions an earlier continuation dropped; any other position was never started."""
    dropped = set(dropped)
    return [saved.get(p, DROPPED if p in dropped else NOT_STARTED) for p in range(1, total + 1)]


def _span(first: int, last: int) -> str:
    return f"item {first}" if first == last else f"items {first}\N{EN DASH}{last}"


def batch_summary(states: Sequence[str], phrases: Mapping[str, str] = PHRASES) -> str:
    """E.g. "items 1-2 reused, item 3 runs again (replay), items 4-5 not started" (positions from 1)."""
    if not states:
        return "no items"
    parts = []
    start = 0
    for i in range(1, len(states) + 1):
        if i == len(states) or states[i] != states[start]:
            parts.append(f"{_span(start + 1, i)} {phrases.get(states[start], states[start])}")
            start = i
    return ", ".join(parts)
