"""Shared by test modules (from test_pydantic_ai_process.py): no test module imports another."""

import signal
import subprocess
import sys
from pathlib import Path

from tasks.models import Step
from tests.processes import ROOT, child_env, lapse_and_supervise, wait_for
from tests.sdk.conftest import agent_task
from tests.sdk.pydantic_agent import read_log


def start_agent(server, token, directory: Path, *, slow: float = 0) -> subprocess.Popen:
    (directory / "outbox").mkdir(parents=True, exist_ok=True)
    env = child_env(CONSOLE_URL=server.url, CONSOLE_WORKER_TOKEN=token, AGENT_DIR=directory, AGENT_SLOW_SECONDS=slow)
    return subprocess.Popen(
        [sys.executable, "-m", "tests.sdk.pydantic_agent"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def killed_during_the_second_tool_call(server, token, org, directory: Path):
    task, first = agent_task(org, PROMPT)
    proc = start_agent(server, token, directory, slow=60)
    wait_for(
        lambda: any(t["tool"] == "send_report" for t in read_log(directory, "tools")),
        timeout=60,
        what="the second tool call",
    )
    proc.send_signal(signal.SIGKILL)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == -signal.SIGKILL, out
    assert list(Step.objects.filter(run=first).order_by("seq").values_list("seq", "tool", "phase")) == SAVED
    assert len(read_log(directory, "model")) == 2
    assert [t["tool"] for t in read_log(directory, "tools")] == ["note_append", "send_report"]
    # The agent's tools are its catalogue, with the modes given to `durable`.
    assert Step.objects.get(run=first, seq=4).recovery_mode == "notify"
    lapse_and_supervise(first)
    first.refresh_from_db()
    assert first.status == "interrupted"
    return task, first


PROMPT = "Write the notes and send the report."


SAVED = [
    (1, "model", "completed"),
    (2, "note_append", "completed"),
    (3, "model", "completed"),
    (4, "send_report", "dispatched"),
]
