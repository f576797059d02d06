"""What recovery saved and cost, said by the console, matches what a real SDK agent counted it called.

The agent (tests/sdk/agents.py) logs every model call and tool call it makes; its model reports
`100 + 10 * messages` input tokens and 7 output tokens per turn. Killed (in-process) in its third model turn,
its continuation reuses the two saved turns and both tool calls and calls the cut-off turn again.
"""

import pytest
from django.test import Client

from tasks.models import Run, Task
from tests.helpers import outer_html, visible_text
from tests.processes import lapse_and_supervise
from tests.sdk.agents import PLAN, TOOLS, Counts, make_agent
from tests.sdk.conftest import agent_task

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def tokens(call: dict) -> int:
    """The tokens the model reported for a logged call (`turn` is the length of the conversation it got)."""
    return 100 + 10 * call["turn"] + 7


def test_the_reuse_and_cost_lines_match_the_calls_the_agent_counted(
    daphne_server, org, coder, console, serving, operator, tmp_path
):
    task, first = agent_task(org, plan=PLAN[:2])
    one = Counts(tmp_path / "one")
    serving(console, "coder", make_agent(one, crash_on_turn=3), tools=TOOLS).join()
    lapse_and_supervise(first)
    second = Run.objects.get(continues=first)
    two = Counts(tmp_path / "two")
    serving(console, "coder", make_agent(two), tools=TOOLS).join()
    second.refresh_from_db()
    assert second.status == "succeeded", second.error_detail

    # What the agent counted: the first process answered two turns (the third died mid-call) and ran two
    # tools; the second called the model once (the cut-off turn) and no tool.
    answered, cut_off = one.read("model")[:-1], one.read("model")[-1]
    again = two.read("model")
    assert len(answered) == 2 and len(one.read("tools")) == 2 and two.read("tools") == []
    assert [c["turn"] for c in again] == [cut_off["turn"]]
    reused_tokens, again_tokens = sum(map(tokens, answered)), sum(map(tokens, again))

    client = Client()
    client.force_login(operator)
    page = visible_text(client.get(f"/agents/coder/runs/{second.pk}/").text)
    assert (
        f"Recovery in this run: reused {len(answered)} model turns ({reused_tokens:,} tokens) and "
        f"{len(one.read('tools'))} tool calls, not called again; called {len(again)} model turn ({again_tokens:,} "
        f"tokens) again, cut off or undecided in an earlier run. This run spent {again_tokens:,} (counted in the "
        "budget)." in page
    ), page
    # The budget counts the tokens spent again like any other: the chain's total is what it counted.
    budget = Task.objects.get(pk=task.pk).budget_used
    assert budget == reused_tokens + len(one.read("tools")) + again_tokens  # a tool call counts 1 unit
    chain = visible_text(outer_html(client.get(f"/tasks/{task.pk}/").text, f"chain-{task.pk}"))
    assert f"Spent {budget:,} in all" in chain and f"reused {len(answered)} model turns ({reused_tokens:,}" in chain
