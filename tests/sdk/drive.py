"""Shared by test modules (from test_agent_process.py): no test module imports another."""

import signal
import subprocess
import sys

from django.test import Client

from tests.helpers import visible_text
from tests.processes import ROOT, child_env
from tests.sdk.agents import Counts


def start_agent(server, token, counts: Counts, *, slow: float = 0, variant: str = "", hold="") -> subprocess.Popen:
    env = child_env(
        CONSOLE_URL=server.url,
        CONSOLE_WORKER_TOKEN=token,
        AGENT_COUNTS=counts.dir,
        AGENT_SLOW_SECONDS=slow,
        AGENT_VARIANT=variant,
        AGENT_HOLD_FILE=hold,
    )
    return subprocess.Popen(
        [sys.executable, "-m", "tests.sdk.agents"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def stop(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=20)
    return out


def decide(api, action, outcome, note=""):
    response = api.post(
        f"/api/actions/{action.pk}/decision/",
        {"version": action.version, "outcome": outcome, "note": note},
        format="json",
    )
    assert response.status_code == 200, response.content
    return response.json()


def task_page(operator, task) -> str:
    client = Client()
    client.force_login(operator)
    response = client.get(f"/tasks/{task.pk}/")
    assert response.status_code == 200
    return visible_text(response.content.decode())
