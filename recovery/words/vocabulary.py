"""The vocabulary: task states, run statuses, causes, gates, owners and decisions in words."""

from recovery import humanize
from recovery.words.lines import Line

TASK_STATES = {
    "needs_decision": "Needs decision",
    "exhausted": "Exhausted",
    "blocked": "Blocked",
    "running": "Running",
    "stopping": "Stopping",
    "queued": "Queued",
    "done": "Done",
    "cancelled": "Cancelled",
    "idle": "Idle",
}

RUN_STATUSES = {
    "queued": "Queued",
    "running": "Running",
    "stopping": "Stopping",
    "succeeded": "Succeeded",
    "failed": "Failed",
    "stopped": "Stopped",
    "interrupted": "Interrupted",
    "cancelled": "Cancelled",
}

RUN_ENDED = {
    "succeeded": "it succeeded",
    "failed": "it failed",
    "interrupted": "it was interrupted",
    "stopped": "it was stopped",
    "cancelled": "it was cancelled before it started",
}

RUN_STATUS_PHRASES = {
    "queued": "is queued",
    "running": "is running",
    "stopping": "is stopping",
    "succeeded": "succeeded",
    "failed": "failed",
    "stopped": "was stopped",
    "interrupted": "was interrupted",
    "cancelled": "was cancelled",
}


def run_status_phrase(status: str) -> str:
    """ "Run #25 succeeded", "Run #25 was stopped": a run's status as the predicate of a sentence."""
    return RUN_STATUS_PHRASES.get(status, f"is {status}")


CAUSES = {
    "unknown_outcome": "A step was cut off after it started and before its result was saved: it may or may not "
    "have happened.",
    "interrupted_twice": "The same step was interrupted twice in this chain, so it is not retried automatically again.",
    "chain_exhausted": "This task has been continued the most times a chain may.",
    "corrupt_checkpoint": "The saved checkpoint contradicts itself, so nothing of it can be replayed safely.",
    "checkpoint_too_large": "A step's result was larger than 8 MiB and could not be saved, so recovery is off for "
    "this run.",
    "checkpoint_purged": "This run's checkpoint was purged after the retention period, so nothing of it can be reused.",
    "agent_missing": "An agent the rest of this run needs no longer exists, so the run cannot be continued.",
    "tool_unknown": "The rest of this run calls a tool it used before that the worker no longer knows (the tool set "
    "changed since the run), so the run cannot be continued.",
    "diverged": "On replay the agent asked for another call than the one saved at this step, so nothing more was "
    "run: the saved results would answer other questions.",
    "auto_resume_off": "The run was interrupted and everything unfinished is safe to run again, but this agent waits "
    "for an operator (auto-resume is off).",
    "step_failed": "A step failed before the worker could finish the run.",
    "lease_lapsed": "The worker stopped renewing its lease, so the run was marked interrupted.",
    "needs_decision": "The run needs a person to decide how to continue.",
    "workspace_validation_failed": "The workspace no longer matches what the checkpoints recorded, so the "
    "continuation was not admitted: files changed, appeared or disappeared on disk after the steps that wrote them.",
    "export_failed": "The run succeeded, but copying its workspace to the export destination failed.",
}

GATES = {
    "task_paused": "the task is paused",
    "ancestor_paused": "a parent task is paused",
    "budget_exhausted": "the task's budget is used up",
    "dependency_open": "a task it depends on is not done",
    "task_closed": "the task is closed",
    "owner_changed": "the task has a new owner since this action opened",
    "lease_live": "the original run still holds a live lease",
    "attempts_exhausted": "every attempt is used",
    "chain_exhausted": "the chain has reached its maximum length",
    "workspace_hold": "workspace hold",
}

OWNERS = {"role:operator": "operators", "role:admin": "admins"}

DECIDED = {
    "performed": "it happened",
    "not_performed": "it did not happen",
    "unresolved": "unresolved",
    "agent_verifies": "the agent verifies it",
}


def step_where(seq, evidence: dict) -> str:
    """ "step 3", or "item 2 of step 1" for a batch item (the action's evidence says which)."""
    if evidence.get("item") and evidence.get("parent_seq"):
        return f"item {evidence['item']} of step {evidence['parent_seq']}"
    return f"step {seq}"


def cause(code: str) -> str:
    return CAUSES.get(code, code.replace("_", " ").capitalize() + ".")


def reason_items(reasons) -> list[dict]:
    """A diagnosis' reasons (Reason objects or their saved dicts) as sentences, each with its code for a `title`:
    "Step 2: …", never "`interrupted_twice` · step 2"."""
    items = []
    for r in reasons or ():
        get = r.get if isinstance(r, dict) else lambda k, r=r: getattr(r, k, None)
        code = get("code") or ""
        seq = get("seq") if isinstance(get("seq"), int) else None
        items.append({"code": code, "text": humanize.reason_text(code, get("detail") or "", seq)})
    return items


def owner(value: str) -> str:
    """`role:admin` → "admins", `user:ada` → "ada", `agent:fixer` → "fixer"."""
    if not value:
        return ""
    return OWNERS.get(value, value.split(":", 1)[-1])


def gate_line(hold) -> Line | None:
    """A closed gate as the card says it: which gate, the fact, and who lifts it."""
    if hold is None:
        return None
    return (f"Held: {GATES.get(hold.gate, hold.gate)} — {hold.detail} Lifted by {hold.lifted_by}.",)


def controls_summary(*, closed: bool, can_admin: bool) -> str:
    """Pure: the heading of the task header's further controls, naming only those this person is shown."""
    names = ["Reopen", "dependencies"] if closed else ["Change owner", "close", "dependencies"]
    if can_admin:
        names.append("budget")
    return ", ".join(names)
