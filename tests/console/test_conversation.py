"""An agent run's page reads as its conversation, and the console says what recovery saved and cost.

The chain is built through the runner and operator APIs as an SDK agent drives them
(tests/console/conversation_scenario.py): a write cut off and handed to the agent, a follow-up read in the
continuation, a model turn cut off and called again in a third run.
"""

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from recovery.conversation import model_reply
from tasks.models import Task
from tests.agents_api import Agent, prompt_task
from tests.console.conversation_scenario import FOLLOW_UP, LONG, PROMPT, REASON, parked, three_runs
from tests.factories import make_agent
from tests.helpers import create_task, outer_html, plan, visible_text

ISO = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}")


@pytest.fixture
def coder(org):
    return make_agent(org, "coder")


def get(user, url) -> str:
    client = Client()
    client.force_login(user)
    r = client.get(url)
    assert r.status_code == 200
    return r.content.decode()


def talk(user, run: int) -> tuple[str, str]:
    """The conversation section of the run's page: its HTML and its visible text."""
    html = outer_html(get(user, f"/agents/coder/runs/{run}/"), f"conversation-{run}")
    return html, visible_text(html)


def test_the_run_page_of_an_agent_run_reads_as_its_conversation(api, runner, coder, viewer):
    chain = three_runs(api, runner)
    html, text = talk(viewer, chain.second)
    # The prompt, then each model turn with its text and tokens, the calls it asked for under it.
    assert text.index("Prompt") < text.index(PROMPT) < text.index("Model turn step 1")
    assert "I will read a.md first." in text and "100 in · 20 out" in text
    assert text.index("Model turn step 3") < text.index(REASON) < text.index("file_write step 4")
    # Each call with its verdict, its arguments as key: value (never a JSON dump).
    assert f"file_read step 2 reused from run #{chain.first} — not called again" in text
    assert "Arguments path a.md" in text
    assert '{"path"' not in html and "{ &quot;" not in html and "&quot;path&quot;:" not in html
    # The notice the model received instead of step 4's result, and who decided it.
    assert "agent verifies — handed to the agent to verify by olive; the model was told: This call (file_write(" in text
    # The follow-up where the agent read it: after the replayed steps, before the turn it answered with.
    assert text.index("file_write step 4") < text.index(FOLLOW_UP) < text.index("Model turn step 5")
    assert f"Read by the agent in run #{chain.second}" in text
    # Long texts fold; times are <time> elements with relative text, never an ISO string in the words.
    assert '<details class="fold-text"><summary>Line 1 of what the model thought' in html
    assert LONG.splitlines()[-1] in text
    assert not ISO.search(text) and "<time datetime=" in html
    # The turn cut off mid-call, in the run it was cut off in; called again in the next run.
    assert "Model turn step 9 · claude cut off mid-call" in text
    _, third = talk(viewer, chain.third)
    assert "Model turn step 9 · claude answered — run again (replay) · 700 in · 50 out Done." in third
    # The output, laid out (a JSON object's keys in whichever order the database keeps them).
    output = third[third.index(f"What the agent returned in run #{chain.third}") :]
    assert "summary notes.md written" in output and "changes sync is faster, login fix" in output
    # The first run: the cut-off write, its unknown outcome and who decided what.
    _, first = talk(viewer, chain.first)
    assert (
        f"file_write step 4 unknown outcome — run #{chain.second} hands it to the agent to verify — decided by "
        "olive: check notes.md before writing it again" in first
    )


def test_a_scripted_run_keeps_its_page(api, runner, agent, operator):
    task = create_task(api, steps=plan(("file_read", {"path": "a"})))
    Agent.claims(runner).call(1, "file_read", {"path": "a"})
    page = get(operator, f"/agents/builder/runs/{task['current_run']}/")
    assert '<section id="conversation-' not in page and f'id="steps-{task["current_run"]}"' in page


def tokens(step) -> int:
    detail = step["usage_detail"] or {}
    return detail.get("input_tokens", 0) + detail.get("output_tokens", 0)


def counted(api, runs: list[int]) -> dict:
    """What the API's steps show: per run, the top-level steps it reused (not notices) and those it ran that an
    earlier run of the chain had dispatched — with the tokens their original runs reported."""
    seen: dict[int, dict] = {}  # seq -> the step as it ran (not a carried copy)
    dispatched: set[int] = set()
    out = {}
    for run in runs:
        steps = [s for s in api.get(f"/api/runs/{run}/").json()["steps"] if s["parent_seq"] is None]
        reused = [s for s in steps if s["reused"] and s["carried"] == "saved_result"]
        again = [s for s in steps if not s["reused"] and s["seq"] in dispatched and s["dispatched_at"]]
        out[run] = {
            "reused_turns": sum(1 for s in reused if s["tool"] == "model"),
            "reused_turn_tokens": sum(tokens(seen[s["seq"]]) for s in reused if s["tool"] == "model"),
            "reused_calls": sum(1 for s in reused if s["tool"] != "model"),
            "again_turns": sum(1 for s in again if s["tool"] == "model"),
            "again_turn_tokens": sum(tokens(s) for s in again if s["tool"] == "model"),
            "again_calls": sum(1 for s in again if s["tool"] != "model"),
            "spent": sum(s["usage"] for s in steps if not s["reused"]),
        }
        for s in steps:
            if not s["reused"]:
                seen[s["seq"]] = s
                if s["dispatched_at"]:
                    dispatched.add(s["seq"])
    return out


def line_for(c: dict) -> str:
    n = lambda k, one, many: f"{c[k]} {one if c[k] == 1 else many}"  # noqa: E731
    reused = f"reused {n('reused_turns', 'model turn', 'model turns')} ({c['reused_turn_tokens']:,} tokens) and "
    reused += f"{n('reused_calls', 'tool call', 'tool calls')}, not called again"
    again = (
        f"called {n('again_turns', 'model turn', 'model turns')} ({c['again_turn_tokens']:,} tokens) again, cut off "
        "or undecided in an earlier run"
        if c["again_turns"]
        else "called nothing again"
    )
    return f"{reused}; {again}."


def test_what_recovery_saved_and_cost_matches_the_counted_calls_per_run_and_per_chain(api, runner, coder, operator):
    chain = three_runs(api, runner)
    runs = [chain.first, chain.second, chain.third]
    c = counted(api, runs)
    assert c[chain.third]["reused_turns"] == 4 and c[chain.third]["again_turns"] == 1  # the scenario did what it says
    for run in runs[1:]:
        page = visible_text(get(operator, f"/agents/coder/runs/{run}/"))
        expected = (
            f"Recovery in this run: {line_for(c[run])} This run spent {c[run]['spent']:,} (counted in the budget)."
        )
        assert expected in page, page
    # The task page shows the chain's totals; the budget counts every token spent again like any other.
    total = {k: sum(c[r][k] for r in runs) for k in c[chain.third]}
    task = Task.objects.get(pk=chain.task)
    assert total["spent"] == task.budget_used == 120 + 1 + 340 + 530 + 1 + 625 + 1 + 750
    page = visible_text(get(operator, f"/tasks/{chain.task}/"))
    assert (
        f"Recovery across the 3 runs of this chain: {line_for(total)[:-1]}. Spent {task.budget_used:,} in all" in page
    ), page


def test_a_first_run_says_nothing_of_recovery(api, runner, coder, operator):
    task, first, _ = parked(api, runner)
    assert "Recovery in this run" not in get(operator, f"/agents/coder/runs/{first.run}/")
    assert "Recovery across" not in get(operator, f"/tasks/{task['id']}/")


def test_the_unknown_outcome_card_quotes_the_models_reason_beside_the_calls_arguments(api, runner, coder, operator):
    task, _, action = parked(api, runner)
    card = outer_html(get(operator, f"/tasks/{task['id']}/"), f"action-{action.pk}")
    text = visible_text(card)
    assert f"The model's reason {REASON} Arguments" in text
    assert f'<q class="said">{REASON}</q>' in card
    # The card drawn alone (an htmx response: here a refusal of a stale version) says the same.
    client = Client()
    client.force_login(operator)
    alone = client.post(
        f"/actions/{action.pk}/decision/", {"version": 99, "outcome": "performed"}, HTTP_HX_REQUEST="true"
    )
    assert alone.status_code == 409 and f"The model's reason {REASON}" in visible_text(alone.content.decode())


def test_the_conversation_page_does_not_grow_in_queries_with_its_steps(api, runner, coder, operator):
    def run_with(turns: int) -> int:
        prompt_task(api, f"{turns} turns")
        agent = Agent.claims(runner)
        for k in range(turns):
            agent.turn(2 * k + 1, {"m": k}, f"turn {k}")
            agent.call(2 * k + 2, "file_read", {"path": f"{k}.md"}, {"content": "x"})
        assert agent.finish(output="ok").status_code == 200
        return agent.run

    small, large = run_with(2), run_with(12)
    client = Client()
    client.force_login(operator)
    counts = []
    for run in (small, large):
        with CaptureQueriesContext(connection) as queries:
            assert client.get(f"/agents/coder/runs/{run}/").status_code == 200
        counts.append(len(queries))
    assert counts[0] == counts[1], counts


def test_model_replies_are_read_in_the_shapes_frameworks_save():
    pydantic_ai = {
        "parts": [
            {"part_kind": "text", "content": "Writing it."},
            {"part_kind": "tool-call", "tool_name": "file_write", "args": '{"path": "a.md"}', "tool_call_id": "1"},
        ],
        "usage": {"input_tokens": 5, "output_tokens": 2},
    }
    anthropic = {"content": [{"type": "text", "text": "Writing it."}, {"type": "tool_use", "name": "file_write",
                                                                      "input": {"path": "a.md"}}]}  # fmt: skip
    openai = {"choices": [{"message": {"content": "Writing it.", "tool_calls": [
        {"function": {"name": "file_write", "arguments": '{"path": "a.md"}'}}]}}]}  # fmt: skip
    plain = {"text": "Writing it.", "call": {"name": "file_write", "args": {"path": "a.md"}}}
    # The SDK's pydantic-ai adapter: its text and calls, read once (not again from the whole response it keeps).
    adapter = {
        "text": "Writing it.",
        "calls": [{"name": "file_write", "args": {"path": "a.md"}}],
        "response": {"kind": "response", **pydantic_ai},
        "usage": {"input_tokens": 5, "output_tokens": 2},
    }
    for reply in (pydantic_ai, anthropic, openai, plain, adapter):
        got = model_reply(reply)
        assert got.text == "Writing it." and got.calls == (("file_write", {"path": "a.md"}),), reply
    assert model_reply("just text").text == "just text" and model_reply(None).text == ""


def test_the_run_pages_push_draws_the_conversation_as_a_reload_does(api, runner, coder, operator):
    from console.live.updates import run_update

    prompt_task(api, PROMPT)
    agent = Agent.claims(runner)
    agent.turn(1, {"m": 1}, REASON)
    agent.cut_off(2, "file_write", {"path": "notes.md", "content": "x"})  # running: the page is live
    pushed = run_update(agent.run, viewer=operator)
    section = outer_html(pushed, f"conversation-{agent.run}")
    assert 'hx-swap-oob="true"' in section
    reloaded = outer_html(get(operator, f"/agents/coder/runs/{agent.run}/"), f"conversation-{agent.run}")
    assert section.replace(' hx-swap-oob="true"', "") == reloaded
    assert "file_write step 2 running" in visible_text(section)


def test_a_cut_off_call_decided_performed_says_who_decided_it_in_the_run_it_was_cut_off_in(api, runner, coder, viewer):
    from tests.console.conversation_scenario import decide

    _, first, action = parked(api, runner)
    decide(api, action, "performed", note="notes.md is on disk")
    Agent.claims(runner)  # the continuation starts
    _, text = talk(viewer, first.run)
    assert (
        f"file_write step 4 unknown outcome — run #{first.run + 1} does not run it again: decided it happened — "
        "olive: notes.md is on disk ; the agent is told so" in text  # (the quoted note is its own text node)
    ), text
    _, second = talk(viewer, first.run + 1)
    assert (
        "file_write step 4 marked performed — marked performed by olive: notes.md is on disk — no saved result"
        in second
    )


def test_a_calls_nested_calls_follow_it_not_the_later_turns(api, runner, coder, viewer):
    prompt_task(api, PROMPT)
    agent = Agent.claims(runner)
    agent.turn(1, {"m": 1}, "Ask the helper.")
    agent.call(2, "research", {"prompt": "list the changes"})
    item = agent.post("steps/", {"seq": 200001, "parent_seq": 2, "tool": "file_read", "args": {"path": "b.md"}})
    assert item.status_code == 201, item.content
    agent.dispatch(200001)
    agent.complete(200001, {"content": "B"})
    agent.turn(3, {"m": 3}, "Done now.")
    assert agent.finish(output="ok").status_code == 200
    _, text = talk(viewer, agent.run)
    assert text.index("research step 2") < text.index("file_read step 2.1") < text.index("Model turn step 3")
