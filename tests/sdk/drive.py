"""Shared by test modules (from test_agent_process.py): no test module imports another."""

import re
import signal
import subprocess
import sys

from django.test import Client

from tasks.models import Run
from tests.helpers import visible_text
from tests.processes import ROOT, child_env, wait_for
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


def readme_code(readme, heading: str) -> str:
    """The first Python code block after `heading` in a README."""
    text = readme.read_text()
    return re.search(r"```python\n(.*?)```", text[text.index(heading) :], re.S).group(1)


def serve_script(code: str, directory, server, token, run) -> str:
    """Run `code` as a script (as a README says: `python agent.py`) until `run` ends; SIGTERM it; its output.

    The script must exit 0 on SIGTERM (serve drains and returns)."""
    script = directory / "agent.py"
    script.write_text(code)
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        cwd=directory,
        env=child_env(CONSOLE_URL=server.url, CONSOLE_WORKER_TOKEN=token),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for(
            lambda: Run.objects.filter(pk=run.pk, status__in=("succeeded", "failed")).exists(),
            timeout=30,
            what="the run",
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0, out
    run.refresh_from_db()
    return out
