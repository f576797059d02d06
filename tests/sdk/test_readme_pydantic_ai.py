"""The READMEs' pydantic-ai example, run as they say, against a live console."""

import pytest

from tests.factories import user_token
from tests.processes import ROOT
from tests.sdk.conftest import agent_task
from tests.sdk.drive import readme_code, serve_script

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

HEADING = "An existing pydantic-ai agent under the console"


def example(readme) -> str:
    return readme_code(readme, HEADING)


def test_both_readmes_show_the_same_example():
    assert example(ROOT / "README.md") == example(ROOT / "sdk" / "README.md")


def test_the_readme_pydantic_ai_example_serves_an_agent_run_to_its_output(
    daphne_server, org, coder, token, admin_user, make_token_client, tmp_path
):
    code = example(ROOT / "README.md")
    assert len(code.splitlines()) <= 30
    _, run = agent_task(org, "Invoice Ada for 120")
    out = serve_script(code, tmp_path, daphne_server, token, run)
    assert run.status == "succeeded", (run.error_detail, out)
    # The model's turns and both tools' calls were steps; the agent's answer is the run's output.
    steps = list(run.steps.order_by("seq").values_list("tool", "recovery_mode", "phase"))
    assert steps[0] == ("model", "replay", "completed") and steps[-1] == ("model", "replay", "completed")
    assert {("find_customer", "replay", "completed"), ("send_invoice", "notify", "completed")} <= set(steps)
    assert "sent 0 to" in run.output
    # serve registered the agent's tools with the modes given to durable: the agent's settings list them.
    settings = make_token_client(user_token(admin_user)).get("/api/agents/coder/settings/").json()
    modes = {t["tool"]: (t["default"], t["mode"]) for t in settings["tools"]}
    assert modes["find_customer"] == ("replay", "replay") and modes["send_invoice"] == ("notify", "notify")
