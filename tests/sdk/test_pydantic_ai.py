"""`recovery_console.pydantic_ai.durable` against a live console, the agent served in a thread.

Each test builds an ordinary pydantic-ai `Agent` (a `FunctionModel`, plain tools) and counts what its model
and tools were called with; a tool "dies" by raising a BaseException, which records nothing (as a SIGKILL).
"""

import json

import pytest
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.toolsets import FunctionToolset

from recovery.models import RecoveryAction
from recovery_console.pydantic_ai import DurableModel, DurableToolset, durable
from tasks.models import Run, Step
from tests.factories import user_token
from tests.processes import lapse_and_supervise
from tests.sdk.conftest import agent_task
from tests.sdk.drive import decide

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


class Died(BaseException):
    """The process dying mid-call: the SDK records no outcome for the call."""


def returns(messages):
    parts = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts]
    return [p for p in parts if p.part_kind == "tool-return" and p.outcome == "success"]


def make(calls: dict, *, instructions="Pay the bill.", die_in_pay=False, retry_once=False, talk=True):
    """An agent that looks the bill up, pays it, and answers; `calls` counts its model and tool calls."""

    def model(messages, info):
        done = returns(messages)
        calls.setdefault("model", []).append(done[-1].content if done else None)
        names = [r.tool_name for r in done]
        if "lookup" not in names:
            return ModelResponse(parts=[ToolCallPart("lookup", {"bill": "B-7"})])
        if "pay" not in names:
            said = [TextPart("Paying it.")] if talk else []  # a streamed run ends at its first text
            return ModelResponse(parts=[*said, ToolCallPart("pay", {"amount": 40})])
        return ModelResponse(parts=[TextPart(json.dumps({"paid": True, "told": done[-1].content}))])

    agent = Agent(FunctionModel(model), instructions=instructions)

    @agent.tool_plain
    def lookup(bill: str) -> dict:
        calls.setdefault("lookup", []).append(bill)
        if retry_once and len(calls["lookup"]) == 1:
            raise ModelRetry("the bill number needs its prefix")
        return {"bill": bill, "amount": 40}

    @agent.tool_plain
    def pay(amount: int) -> str:
        calls.setdefault("pay", []).append(amount)
        if die_in_pay:
            raise Died("cut off while paying")
        return f"paid {amount}"

    return agent


MODES = {"lookup": "replay", "pay": "notify"}


def died_while_paying(console, serving, org, calls, **kwargs):
    task, first = agent_task(org, "Pay bill B-7.")
    serving(console, "coder", durable(make(calls, die_in_pay=True, **kwargs), modes=MODES)).join()
    steps = [(s.seq, s.tool, s.recovery_mode, s.phase) for s in Step.objects.filter(run=first).order_by("seq")]
    assert steps[-1][1:] == ("pay", "notify", "dispatched")
    lapse_and_supervise(first)
    return task, first


def test_a_person_says_it_happened_and_the_model_reads_their_note_as_the_tools_result(
    daphne_server, org, coder, console, serving, api
):
    first_calls = {}
    _, first = died_while_paying(console, serving, org, first_calls)
    action = RecoveryAction.objects.get(run=first, kind="unknown_outcome", status="open")
    decide(api, action, "performed", note="The bank shows the payment of 40.")

    calls = {}
    serving(console, "coder", durable(make(calls), modes=MODES)).join()
    second = Run.objects.get(continues=first)
    assert second.status == "succeeded", second.error_detail
    # Nothing saved was called again and nothing decided ran again: one model call, after the notice.
    assert calls.get("lookup") is None and calls.get("pay") is None
    assert len(calls["model"]) == 1
    told = calls["model"][0]
    assert "olive" in told and "The bank shows the payment of 40." in told
    assert json.loads(second.output) == {"paid": True, "told": told}


def test_a_continuation_whose_agent_changed_its_instructions_is_refused_before_anything_runs(
    daphne_server, org, coder, console, serving, api
):
    _, first = died_while_paying(console, serving, org, {})
    action = RecoveryAction.objects.get(run=first, kind="unknown_outcome", status="open")
    decide(api, action, "agent_verifies")

    calls = {}
    changed = make(calls, instructions="Pay the bill, then email the receipt.")
    serving(console, "coder", durable(changed, modes=MODES)).join()
    second = Run.objects.get(continues=first)
    assert second.status == "failed" and second.error_code == "diverged"
    assert calls == {}  # neither the model nor a tool was called
    diverged = RecoveryAction.objects.get(run=second, kind="diverged")
    evidence = api.get(f"/api/actions/{diverged.pk}/").json()["evidence"]
    assert evidence["seq"] == 1 and evidence["saved"]["tool"] == evidence["asked"]["tool"] == "model"
    saved, asked = evidence["saved"]["args"]["request"], evidence["asked"]["args"]["request"]
    assert saved["messages"][0] == {"role": "instructions", "content": "Pay the bill."}
    assert asked["messages"][0]["content"] == "Pay the bill, then email the receipt."


def test_a_tools_model_retry_is_saved_and_replayed_as_the_same_retry(daphne_server, org, coder, console, serving, api):
    _, first = died_while_paying(console, serving, org, {}, retry_once=True)
    assert [s.tool for s in Step.objects.filter(run=first).order_by("seq")] == [
        "model",
        "lookup",  # the retry
        "model",
        "lookup",
        "model",
        "pay",
    ]
    action = RecoveryAction.objects.get(run=first, kind="unknown_outcome", status="open")
    decide(api, action, "performed", note="paid")

    calls = {}
    serving(console, "coder", durable(make(calls, retry_once=True), modes=MODES)).join()
    second = Run.objects.get(continues=first)
    # The replayed retry sent the model the same retry prompt, so its saved turns matched: no divergence.
    assert second.status == "succeeded", second.error_detail
    assert calls.get("lookup") is None and len(calls["model"]) == 1


def test_a_streamed_model_request_is_a_checkpointed_step_too(daphne_server, org, coder, console, serving):
    calls = {}
    agent = make(calls, talk=False)

    async def streamed(run):
        # DurableModel on its own, under a streamed run: the response is checkpointed whole, then streamed.
        toolsets = [DurableToolset(t, run) for t in agent.toolsets]
        with agent.override(model=DurableModel(agent.model, run), toolsets=toolsets, tools=[]):
            async with agent.run_stream(run.prompt) as result:
                return await result.get_output()

    _, run = agent_task(org, "Pay bill B-7.")
    serving(console, "coder", streamed).join()
    run.refresh_from_db()
    assert run.status == "succeeded", run.error_detail
    steps = [s.tool for s in Step.objects.filter(run=run).order_by("seq")]
    assert steps == ["model", "lookup", "model", "pay", "model"]
    assert json.loads(run.output)["paid"] is True and len(calls["model"]) == 3


def test_a_tool_first_listed_at_run_time_joins_the_agents_catalogue_with_its_mode(
    daphne_server, org, coder, console, serving, admin_user, make_token_client
):
    calls = {}
    agent = make(calls)

    @agent.toolset
    def receipts(ctx):  # a toolset the agent builds per run, like an MCP server's: unknown before it runs
        def email_receipt(to: str) -> str:
            """Email the receipt."""
            return f"emailed {to}"

        return FunctionToolset([email_receipt])

    fn = durable(agent, modes={"email_receipt": "forget"} | MODES)
    assert {t.name for t in fn.tools} == {"lookup", "pay", "email_receipt"}
    bare = durable(agent, modes=MODES)
    assert "email_receipt" not in {t.name for t in bare.tools}

    _, run = agent_task(org, "Pay bill B-7.")
    serving(console, "coder", bare).join()
    run.refresh_from_db()
    assert run.status == "succeeded", run.error_detail
    settings = make_token_client(user_token(admin_user)).get("/api/agents/coder/settings/").json()
    listed = {t["tool"]: t for t in settings["tools"]}
    assert listed["email_receipt"]["default"] == "notify"  # not named in modes: notify
    assert listed["email_receipt"]["description"] == "Email the receipt."
    assert listed["pay"]["default"] == "notify" and listed["lookup"]["default"] == "replay"


def counting(seen: list, die_at_results: int | None = None):
    """An agent that calls `step` three times, then answers with the user prompts it saw; it dies at the model
    call that follows `die_at_results` tool results. `seen` gets the user prompts of every model call."""

    def model(messages, info):
        parts = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts]
        users = [p.content for p in parts if p.part_kind == "user-prompt"]
        results = [p for p in parts if p.part_kind == "tool-return"]
        seen.append(users)
        if len(results) == die_at_results:
            raise Died("cut off in a model call")
        if len(results) < 3:
            return ModelResponse(parts=[ToolCallPart("step", {"n": len(results)})])
        return ModelResponse(parts=[TextPart(json.dumps(users))])

    agent = Agent(FunctionModel(model))

    @agent.tool_plain
    def step(n: int) -> int:
        return n

    return agent


def test_a_follow_up_read_by_a_run_that_then_died_joins_the_next_replay_where_it_joined_before(
    daphne_server, org, coder, console, serving, api
):
    task, first = agent_task(org, "Count to three.")
    serving(console, "coder", durable(counting([], die_at_results=2))).join()  # dies in its third turn
    assert api.post(f"/api/tasks/{task.pk}/messages/", {"body": "Say hello."}, format="json").status_code == 201
    lapse_and_supervise(first)
    second = Run.objects.get(continues=first)
    seen = []
    serving(console, "coder", durable(counting(seen, die_at_results=3))).join()  # reads it, dies in turn 4
    assert seen == [["Count to three.", "Say hello."], ["Count to three.", "Say hello."]]
    assert api.get(f"/api/tasks/{task.pk}/").json()["messages"][0]["status"] == "read"
    lapse_and_supervise(second)
    third = Run.objects.get(continues=second)
    assert third.messages.count() == 0  # read: no claim carries it again

    seen = []
    serving(console, "coder", durable(counting(seen))).join()
    third.refresh_from_db()
    # Its replay put the follow-up back where the second run read it: no divergence, and one model call.
    assert third.status == "succeeded", (third.error_code, third.error_detail)
    assert seen == [["Count to three.", "Say hello."]]
    assert json.loads(third.output) == ["Count to three.", "Say hello."]
