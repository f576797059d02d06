"""recovery_console: run AI agents under the recovery console.

    from recovery_console import Console, Tool, serve

    def agent(run):
        reply = run.model("my-model", {"prompt": run.prompt}, call=ask_the_model)
        ...
        return "the answer"

    serve(Console(url, token), "coder", agent, tools=[Tool("file_write", "notify")])

Every `run.tool(...)` and `run.model(...)` is a checkpointed step; a continuation replays the saved ones
without calling anything again. See the project README, "Agents on the SDK".
"""

from recovery_console.client import Console, Tool, tool
from recovery_console.errors import (
    ConsoleError,
    ConsoleUnavailable,
    Diverged,
    Interrupted,
    LeaseLost,
    Refused,
    RunFailed,
    ShuttingDown,
    StepFailed,
    StopRequested,
    ToolError,
)
from recovery_console.run import Message, Notice, Run
from recovery_console.serve import Outcome, execute, serve

__all__ = [
    "Console",
    "ConsoleError",
    "ConsoleUnavailable",
    "Diverged",
    "Interrupted",
    "LeaseLost",
    "Message",
    "Notice",
    "Outcome",
    "Refused",
    "Run",
    "RunFailed",
    "ShuttingDown",
    "StepFailed",
    "StopRequested",
    "Tool",
    "ToolError",
    "execute",
    "serve",
    "tool",
]
