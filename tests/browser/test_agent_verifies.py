"""An operator hands a pydantic-ai agent's unknown outcome back to the agent, in the browser.

The agent (tests/sdk/pydantic_agent.py, under `recovery_console.pydantic_ai.durable`) is SIGKILLed during its
second tool call, `send_report` (notify). The task page's card offers "The agent verifies"; the continuation
tells the model, which checks, sends again, and answers; the task page shows the answer.
"""

import json
import re

import pytest
from playwright.sync_api import expect

from recovery.models import RecoveryAction, RecoveryAttempt
from tasks.models import Run
from tests.browser.pages import reload_until
from tests.factories import make_agent, worker_token
from tests.sdk.drive import start_agent
from tests.sdk.drive_pydantic import killed_during_the_second_tool_call
from tests.sdk.pydantic_agent import read_log
from tests.sdk.test_agent_process import stop

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def coder(org):
    return make_agent(org, "coder")


@pytest.fixture
def token(org):
    return worker_token(org, "sdk")


def test_an_operator_lets_the_agent_verify_and_the_task_page_shows_its_answer(
    daphne_server, page, sign_in, org, coder, token, operator, tmp_path
):
    task, first = killed_during_the_second_tool_call(daphne_server, token, org, tmp_path / "one")
    action = RecoveryAction.objects.get(run=first, kind="unknown_outcome", status="open")

    sign_in(page, "olive")
    page.goto(f"{daphne_server.url}/tasks/{task.pk}/")
    card = page.locator(f"#action-{action.pk}")
    expect(card).to_contain_text("Unknown outcome")
    expect(card.locator("code.tool")).to_have_text("send_report")
    card.get_by_label("What did you find?").fill("Not sure it went out; check the outbox.")
    card.get_by_role("button", name="The agent verifies").click()
    expect(card).to_contain_text("Handed to the agent", timeout=10_000)
    expect(card.locator(".refusal")).to_have_count(0)
    attempt = RecoveryAttempt.objects.get(action=action)
    assert attempt.decision == "agent_verifies" and attempt.requested_by == "olive"
    assert attempt.note == "Not sure it went out; check the outbox."
    continuation = attempt.continuation_run
    assert continuation.status == "queued"

    two = tmp_path / "two"
    proc = start_agent(daphne_server, token, two)
    try:
        task_card = page.locator("main")
        reload_until(page, task_card, re.compile("The notes and the report are done"), timeout=60)
    finally:
        out = stop(proc)
    assert proc.returncode == 0, out
    continuation = Run.objects.get(pk=continuation.pk)
    assert continuation.status == "succeeded"
    # The model's next request held the notice in place of the tool's result; nothing saved ran again.
    turns = read_log(two, "model")
    told = turns[0]["last"]
    assert told["tool"] == "send_report" and "verify the current state before repeating it" in told["content"]
    assert [t["tool"] for t in read_log(two, "tools")] == ["file_check", "send_report"]
    assert json.loads(continuation.output)["told"] == [told["content"]]
    # The card says who handed it over and what the model was told.
    expect(card).to_contain_text("olive")
    expect(card).to_contain_text(told["content"][:60])
