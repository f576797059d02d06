"""The README's agent example, run as the README says, against a live console."""

from pathlib import Path

import pytest

from tests.factories import user_token
from tests.processes import ROOT
from tests.sdk.conftest import agent_task
from tests.sdk.drive import readme_code, serve_script

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_the_readme_example_serves_an_agent_run_to_its_output(
    daphne_server, org, coder, token, admin_user, make_token_client, tmp_path
):
    code = readme_code(ROOT / "README.md", "## Agents on the SDK")
    assert len([line for line in code.splitlines() if line.strip()]) <= 32  # short, as ruff formats it
    task, run = agent_task(org, "Write notes.md")
    out = serve_script(code, tmp_path, daphne_server, token, run)
    assert run.status == "succeeded", (run.error_detail, out)
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
