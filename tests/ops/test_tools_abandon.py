"""Long tools notice the worker's drain deadline (`ToolContext.abandon`) and give up at once."""

import threading
import time
from pathlib import Path

import pytest

from recovery_console.reference.tools import ToolContext, ToolError, ToolInterrupted, run_tool


def abandon_after(seconds: float) -> threading.Event:
    event = threading.Event()
    threading.Timer(seconds, event.set).start()
    return event


@pytest.mark.parametrize(
    ("tool", "args"), [("sleep", {"seconds": 600}), ("bash", {"command": "sleep 600", "timeout": 600})]
)
def test_a_long_tool_gives_up_when_abandoned(tmp_path: Path, tool, args):
    started = time.monotonic()
    with pytest.raises(ToolInterrupted):
        run_tool(tool, args, ToolContext(workspace=str(tmp_path), abandon=abandon_after(0.3)))
    assert time.monotonic() - started < 2


def test_bash_keeps_its_output_and_timeout_while_watching(tmp_path: Path):
    ctx = ToolContext(workspace=str(tmp_path))
    assert run_tool("bash", {"command": "sleep 0.3; echo done"}, ctx)["stdout"] == "done\n"
    with pytest.raises(ToolError, match=r"timed out after 0\.3 s"):
        run_tool("bash", {"command": "sleep 5", "timeout": 0.3}, ctx)


def test_a_stop_still_lets_bash_finish_its_command(tmp_path: Path):
    """Stop (the run's cancel) is honoured at the step boundary; only the drain deadline kills a command."""
    cancel = threading.Event()
    cancel.set()
    result = run_tool("bash", {"command": "sleep 0.2; echo kept"}, ToolContext(workspace=str(tmp_path), cancel=cancel))
    assert result["stdout"] == "kept\n"
