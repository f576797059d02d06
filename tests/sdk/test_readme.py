"""The README's agent example, run as the README says, against a live console."""

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tasks.models import Run
from tests.factories import user_token
from tests.processes import ROOT, child_env, wait_for
from tests.sdk.conftest import agent_task

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Agents on the SDK") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_example_serves_an_agent_run_to_its_output(
    daphne_server, org, coder, token, admin_user, make_token_client, tmp_path
):
    code = readme_example()
    assert len([line for line in code.splitlines() if line.strip()]) <= 32  # short, as ruff formats it
    script = tmp_path / "agent.py"
    script.write_text(code)
    task, run = agent_task(org, "Write notes.md")
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=child_env(CONSOLE_URL=daphne_server.url, CONSOLE_WORKER_TOKEN=token),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for(lambda: Run.objects.filter(pk=run.pk, status="succeeded").exists(), timeout=30, what="the run")
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0, out
    run.refresh_from_db()
    assert run.output == "notes.md is written"
    assert list(run.steps.order_by("seq").values_list("seq", "tool", "phase")) == [
        (1, "model", "completed"),
        (2, "write_file", "completed"),
        (3, "model", "completed"),
    ]
    assert (Path(task.workspace) / "notes.md").read_text() == "hello\n"
    # serve registered the example's tool with its mode: the agent's settings list it.
    settings = make_token_client(user_token(admin_user)).get("/api/agents/coder/settings/").json()
    assert {"tool": "write_file", "default": "notify", "mode": "notify"}.items() <= next(
        t for t in settings["tools"] if t["tool"] == "write_file"
    ).items()
