"""Triage at scale in words (DESIGN §12): board filters, sort and age names, bulk operations."""

from recovery.words.lines import At, Line
from recovery.words.vocabulary import DECIDED, GATES, OWNERS, RUN_STATUSES, TASK_STATES, owner

SORT_NAMES = {"recent": "Last change first", "urgency": "Most urgent first"}
AGE_NAMES = {"1h": "over an hour", "4h": "over 4 hours", "1d": "over a day", "1w": "over a week"}


def owner_option(value: str) -> str:
    """A recovery owner as the filter menu names it."""
    return OWNERS.get(value) or owner(value) or "operators"


def age_label(waiting: bool) -> str:
    """What a board row's age measures: since when it waits on a person (an action opened), or its last change."""
    return "waiting since" if waiting else "last change"


BULK_ACTIONS = {
    "retry": "Retry",
    "cancel": "Cancel the recovery action",
    "pause": "Pause",
    "resume": "Resume",
    "continue": "Continue now",
    "decide": "Decide the unknown outcome",
}
BULK_RESULTS = {"": "Not reached yet", "applied": "Applied", "skipped": "Skipped", "failed": "Failed"}
BULK_REASONS = {
    "changed_since_preview": "it changed since the preview, so it was not acted on",
    "cancelled": "not reached: the operation was cancelled first, so nothing was done to it",
    "not_visible": "you can no longer see this task",
    "no_open_action": "it has no open recovery action to retry",
    "no_live_action": "it has no live recovery action to cancel",
    "no_unknown_outcome": "it has no open unknown-outcome decision",
    "workspace_action": "its recovery action is about the workspace: an admin settles it with a repair",
    "exhausted": "its recovery action is exhausted: an admin may grant one more attempt on its card",
    "recovery_unavailable": "recovery of its run is unavailable: start over or cancel",
    "duplicate_risk_not_accepted": "it would run an operation of unknown outcome again, and the duplicate risk "
    "was not accepted",
    "not_agent_run": "its run is a scripted plan: only an agent run's agent can verify a call itself",
    "already_paused": "it is already paused",
    "not_paused": "it is not paused",
    "run_live": "a run of it is still queued or running",
    "needs_decision": "a recovery action decides how it continues",
    "nothing_to_continue": "there is nothing to continue",
    "workspace_hold": "workspace hold: the continuation was refused because the workspace differs from its "
    "checkpoints; an admin repairs it",
    "forbidden": "you no longer have the role for this",
    "error": "an unexpected error",
}


def bulk_reason(code: str) -> str:
    """Why an item was (or would be) refused, in humanize."""
    if code in BULK_REASONS:
        return BULK_REASONS[code]
    if code in GATES:
        return GATES[code]
    return code.replace("_", " ") if code else ""


def bulk_risk(op_action: str, params: dict) -> str:
    """The consent the preview carries, restated before anything happens."""
    if op_action == "decide" and params.get("outcome") == "not_performed":
        return "Each operation of unknown outcome runs again: if it did happen, it happens twice."
    if op_action == "retry" and params.get("accept_duplicate_risk"):
        return "An operation of unknown outcome runs again where a task has one: if it did happen, it happens twice."
    return ""


_SEEN_WORDS = {"state": "state", "run": "latest run", "run_status": "its run"}


def bulk_changes(diff) -> str:
    """What changed between the preview and now (rules.bulk.changes), as one sentence."""
    parts = []
    fields = {f for f, _, _ in diff}
    for f, then, now in diff:
        if f == "state":
            parts.append(f"it was {TASK_STATES.get(then, then)}, now {TASK_STATES.get(now, now)}")
        elif f == "paused":
            parts.append("it was paused" if now else "its pause was lifted")
        elif f == "run":
            parts.append(f"a new run #{now} exists" if now else "its run is gone")
        elif f == "run_status" and "run" not in fields:
            parts.append(f"its run became {RUN_STATUSES.get(now, now).lower()}")
        elif f == "action":
            parts.append(f"its recovery action is now #{now}" if now else "its recovery action is no longer live")
        elif f == "action_version" and "action" not in fields:
            parts.append("its recovery action changed")
    return ("Changed since the preview: " + "; ".join(dict.fromkeys(parts)) + ".") if parts else ""


def bulk_item_text(op_action: str, params: dict, item) -> str:
    """What an item's result says: what was done (as far as the item's saved facts go), or why not."""
    if item.result == "applied":
        run = f" — run #{item.run_id}" if item.run_id else ""
        if op_action == "retry":
            return f"Retry requested{run}."
        if op_action == "decide":
            decided = DECIDED.get(params.get("outcome", ""), "")
            return f"Decision recorded: {decided}{run}."
        if op_action == "cancel":
            return f"Recovery action #{item.action_id} cancelled." if item.action_id else "Recovery action cancelled."
        if op_action == "pause":
            return "Paused."
        if op_action == "resume":
            return "Pause lifted."
        return f"Continuation requested{run}."
    if not item.result:
        return ""
    words = bulk_reason(item.reason)
    text = words[:1].upper() + words[1:] + "." if words else ""
    if item.detail and item.reason != "cancelled":
        text = f"{text} {item.detail}".strip()
    return text


def bulk_predicted(code: str) -> str:
    """What the preview expects for an item."""
    return "Would be acted on." if not code else f"Would be skipped: {bulk_reason(code)}."


def bulk_title(op) -> str:
    params = op.params or {}
    name = BULK_ACTIONS.get(op.action, op.action)
    if op.action == "decide":
        name += f": {DECIDED.get(params.get('outcome', ''), '')}"
    return f"{name} · {op.count:,} task{'s' if op.count != 1 else ''}"


def bulk_status(op, counts, *, expired: bool) -> tuple[str, str]:
    """(badge, tone) of an operation."""
    if op.status == "previewed":
        return ("Preview expired", "idle") if expired else ("Preview", "decide")
    if op.status == "running":
        return "Running", "running"
    if op.status == "finished":
        return ("Finished with failures", "bad") if counts.failed else ("Finished", "ok")
    return ("Discarded", "idle") if op.started_at is None else ("Cancelled", "idle")


def bulk_line(op, counts, *, expired: bool) -> Line:
    """Where an operation stands, only as far as its items' saved results go."""
    reached, total = counts.reached, counts.total
    if op.status == "previewed":
        if expired:
            return ("This preview expired ", At(op.expires_at), " — nothing was done. Preview again.")
        return ("Preview — nothing has been done yet. Confirm before it expires ", At(op.expires_at), ".")
    if op.status == "running":
        if reached == 0:
            return (
                f"Started by {op.actor_name} ",
                At(op.started_at),
                ": the supervisor works through it in batches; nothing has been applied yet.",
            )
        return (f"Running — {reached:,} of {total:,} reached.",)
    if op.status == "finished":
        return ("Finished ", At(op.finished_at), f" — all {total:,} reached.")
    if op.started_at is None:
        return (f"Discarded by {op.cancelled_by} ", At(op.finished_at), " — nothing was done.")
    return (
        f"Cancelled by {op.cancelled_by} ",
        At(op.finished_at),
        f" — {reached:,} of {total:,} were reached before it stopped; the other {counts.untouched:,} were not touched.",
    )


def bulk_counts_text(counts) -> str:
    """Where the items stand; "skipped" counts those judged and refused, not those a cancel never reached."""
    text = f"{counts.applied:,} applied · {counts.skipped - counts.untouched:,} skipped · {counts.failed:,} failed"
    return text + (f" · {counts.untouched:,} not reached" if counts.untouched else "")


FILTER_NAMES = {
    "state": "state",
    "q": "search",
    "agent": "agent",
    "owner": "recovery owner",
    "tool": "tool",
    "age": "waiting",
    "sort": "order",
}


def _filter_value(key: str, value: str) -> str:
    if key == "state":
        views = {"active": "running or stopping", "follow_through": "needs follow-through"}
        return views.get(value) or TASK_STATES.get(value, value)
    if key == "age":
        return AGE_NAMES.get(value, value)
    if key == "owner":
        return owner_option(value)
    return value


def bulk_selection(selection: dict) -> str:
    """How the scope was chosen, as the preview froze it."""
    if "filter" in (selection or {}):
        f = selection["filter"] or {}
        shown = {k: v for k, v in f.items() if k != "sort"}
        if not shown:
            return "Every task you could see when the preview was made."
        said = "; ".join(f"{FILTER_NAMES.get(k, k)} {_filter_value(k, v)}" for k, v in sorted(shown.items()))
        return f"Every task that matched the filter when the preview was made ({said}); later matches are not in it."
    n = (selection or {}).get("ids", 0)
    return f"{n:,} task{'s' if n != 1 else ''} chosen by hand."
