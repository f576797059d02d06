"""Runs to continue from a step: a five-step plan whose shell steps append a line to a file in the workspace."""

from tasks.services import task_create
from tests.helpers import plan

# Steps 1, 2, 4 and 5 are bash (notify): each appends its line to log.txt; step 3 sleeps (replay).
FIVE_STEPS = (
    ("bash", {"command": "echo one >> log.txt"}),
    ("bash", {"command": "echo two >> log.txt"}),
    ("sleep", {"seconds": 0}),
    ("bash", {"command": "echo four >> log.txt"}),
    ("bash", {"command": "echo five >> log.txt"}),
)


def five_step_task(org, *, title: str = "five steps", agent: str = "builder"):
    return task_create(org=org, actor="t", title=title, agent=agent, input=plan(*FIVE_STEPS))
