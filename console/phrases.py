"""Plain words for codes. A code is never shown alone; it is always explained."""

CAUSES = {
    "unknown_outcome": "A step was cut off after it started and before its result was saved. "
    "It may or may not have happened.",
    "interrupted_twice": "The same step was interrupted twice in this chain, so it is not retried automatically again.",
    "chain_exhausted": "This task has been continued the maximum number of times.",
    "corrupt_checkpoint": "The saved checkpoint contradicts itself, so nothing of it can be replayed safely.",
    "checkpoint_too_large": "A step's result was larger than 8 MiB and could not be saved, so recovery is off "
    "for this run.",
    "auto_resume_off": "The run was interrupted and is safe to continue, but this agent does not resume on its own.",
    "step_failed": "A step failed before the worker could finish the run.",
    "lease_lapsed": "The worker stopped renewing its lease, so the run was marked interrupted.",
    "needs_decision": "The run needs a person to decide how to continue.",
}

GATES = {
    "task_paused": "the task is paused",
    "ancestor_paused": "a parent task is paused",
    "budget_exhausted": "the task's budget is used up",
    "dependency_open": "a task it depends on is not done",
    "task_closed": "the task is closed",
    "owner_changed": "the task has a new owner since this opened",
    "lease_live": "the original run still holds a live lease",
    "attempts_exhausted": "every attempt is used",
    "chain_exhausted": "the chain has reached its maximum length",
}

VERDICTS = {
    "reuse": "reused",
    "not_dispatched": "not dispatched",
    "replay": "replayed",
    "unknown_outcome": "unknown outcome",
    "drop": "dropped",
    "corrupt": "corrupt",
}

STATES = {
    "needs_decision": "Needs decision",
    "exhausted": "Exhausted",
    "blocked": "Blocked",
    "running": "Running",
    "queued": "Queued",
    "done": "Done",
    "cancelled": "Cancelled",
    "idle": "Idle",
}

OWNERS = {"role:operator": "operators", "role:admin": "admins"}


def cause(code: str) -> str:
    return CAUSES.get(code, code.replace("_", " ").capitalize() + ".")


def owner(value: str) -> str:
    if not value:
        return ""
    if value in OWNERS:
        return OWNERS[value]
    return value.split(":", 1)[-1]


DISPOSITIONS = {
    "auto_resumable": "safe to continue automatically",
    "needs_decision": "needs a person's decision",
    "corrupt": "checkpoint is contradictory; nothing is replayed",
    "exhausted": "not retried automatically again",
    "none": "nothing to recover",
}
