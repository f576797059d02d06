"""Pure: the task-level holds that close admission, first one wins.

The claim skips a run whose task is held; recovery's gates add the gates of an
action (owner, lease, attempts, chain) on top of these.
"""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class TaskFacts:
    task_id: int
    status: str
    paused: bool
    budget_limit: int | None
    budget_used: int
    paused_ancestors: tuple[int, ...] = ()
    open_dependencies: tuple[int, ...] = ()
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Hold:
    gate: str
    detail: str
    lifted_by: str


def task_hold(facts: TaskFacts) -> Hold | None:
    if facts.status in ("done", "cancelled"):
        return Hold("task_closed", f"Task #{facts.task_id} is {facts.status}.", "an operator, with Reopen")
    if facts.paused:
        return Hold("task_paused", f"Task #{facts.task_id} is paused.", "an operator, with Resume task")
    if facts.paused_ancestors:
        ids = ", ".join(f"#{i}" for i in facts.paused_ancestors)
        return Hold("ancestor_paused", f"Parent task {ids} is paused.", f"an operator, with Resume task on task {ids}")
    if facts.budget_limit is not None and facts.budget_used >= facts.budget_limit:
        return Hold(
            "budget_exhausted",
            f"Budget used {facts.budget_used} of {facts.budget_limit}.",
            "an admin, by raising or removing the limit under Budget",
        )
    if facts.open_dependencies:
        ids = ", ".join(f"#{i}" for i in facts.open_dependencies)
        return Hold(
            "dependency_open",
            f"Waiting on task {ids} to be done.",
            "whoever finishes that task, or an operator removing it under Dependencies",
        )
    return None
