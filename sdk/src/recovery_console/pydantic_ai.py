"""Put an existing pydantic-ai `Agent` under the console: `serve(console, "coder", durable(agent, modes=...))`.

    from recovery_console.pydantic_ai import durable

    serve(console, "coder", durable(agent, modes={"send_invoice": "notify", "read_file": "replay"}))

`durable(agent)` returns the function `serve` calls for each claimed run. It runs the agent on the run's
prompt with its model and its toolsets wrapped (pydantic-ai's public `WrapperModel` and `WrapperToolset`,
the seams of its own durable-execution integrations), without changing the agent:

- every model request is a `model` step: the request (the conversation, without timestamps or ids) is the
  step's argument, the response and its token usage the result. On a continuation a saved turn is returned
  without calling the model, and the replay check compares each request with the saved one;
- every tool call is a step of that tool (its mode comes from `modes`; a tool not named there is `notify`).
  A saved result is returned without calling the tool; a step someone decided comes back to the model as
  the tool's result: the notice's sentence (`Notice.text`);
- the follow-ups a continuation carries join the conversation as user prompts where replay ends, once; one
  that an earlier run of the chain read (then died) joins the replay again where it joined then (the saved
  model request says where);
- the agent's tools (those of its function toolsets, and any named in `modes`) are the agent's catalogue:
  `serve` registers them at start; a tool that shows up only at run time (an MCP server's) is registered
  when it is first listed.

Tool calls run one at a time (`parallel_tool_call_execution_mode("sequential")`), so a continuation numbers
them as the first run did. A tool's `ModelRetry` is kept as the step's result and raised again on replay.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models import CompletedStreamedResponse, Model, ModelRequestParameters
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset, WrapperToolset
from pydantic_core import to_jsonable_python

from recovery_console import payloads
from recovery_console.client import MODES, Tool
from recovery_console.run import MODEL, Notice, Run

__all__ = ["DurableModel", "DurableToolset", "conversation", "durable"]

DEFAULT_MODE = "notify"  # a tool not named in `modes`: its outcome is unknown when cut off
RETRY = "$model_retry"  # a tool's ModelRetry, kept as the step's result


# --- the conversation as a step's argument -------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    return to_jsonable_python(value, bytes_mode="base64", fallback=repr)


def _content(part: Any) -> Any:
    return _jsonable(getattr(part, "content", None))


def conversation(messages: list[ModelMessage]) -> dict:
    """A model request as the step's argument: `{"messages": [{"role", "content" | "call", "tool"?}, ...]}`.

    Only what the model reads: no timestamps, run ids or tool-call ids, which differ from one run to the
    next, so the same conversation gives the same digest on a continuation (the replay check).
    """
    out: list[dict] = []
    for message in messages:
        if isinstance(message, ModelRequest):
            if message.instructions:
                out.append({"role": "instructions", "content": message.instructions})
            for part in message.parts:
                kind = part.part_kind
                if kind == "system-prompt":
                    out.append({"role": "system", "content": _content(part)})
                elif kind == "user-prompt":
                    out.append({"role": "user", "content": _content(part)})
                elif kind == "tool-return":
                    entry = {"role": "tool", "tool": part.tool_name, "content": _content(part)}
                    outcome = getattr(part, "outcome", "success")
                    if outcome != "success":  # retried, failed, denied: the model reads it as such
                        entry["outcome"] = outcome
                    out.append(entry)
                elif kind == "retry-prompt":
                    out.append({"role": "retry", "tool": part.tool_name, "content": _content(part)})
                else:
                    out.append({"role": kind, "content": _content(part)})
        elif isinstance(message, ModelResponse):
            for part in message.parts:
                if isinstance(part, TextPart):
                    out.append({"role": "assistant", "content": part.content})
                elif isinstance(part, ToolCallPart):
                    out.append({"role": "assistant", "call": {"name": part.tool_name, "args": part.args_as_dict()}})
                else:
                    out.append({"role": part.part_kind, "content": _content(part)})
    return {"messages": out}


def _record(response: ModelResponse) -> dict:
    """A model response as the step's result: its text and calls (readable), the response, its usage."""
    texts = [p.content for p in response.parts if isinstance(p, TextPart)]
    calls = [{"name": p.tool_name, "args": p.args_as_dict()} for p in response.parts if isinstance(p, ToolCallPart)]
    usage = response.usage
    return {
        "text": "\n".join(texts) if texts else None,
        "calls": calls,
        "response": ModelMessagesTypeAdapter.dump_python([response], mode="json")[0],
        "usage": {"input_tokens": int(usage.input_tokens or 0), "output_tokens": int(usage.output_tokens or 0)},
    }


def _response(record: Any) -> ModelResponse:
    if not isinstance(record, Mapping) or not isinstance(record.get("response"), Mapping):
        raise RuntimeError("the saved model turn has no response to replay (it was too large to checkpoint)")
    (response,) = ModelMessagesTypeAdapter.validate_python([record["response"]])
    return response


# --- the wrappers ----------------------------------------------------------------------------------------


class DurableModel(WrapperModel):
    """A pydantic-ai model whose every request is a checkpointed `model` step of `run`."""

    def __init__(self, wrapped: Model | str, run: Run):
        super().__init__(wrapped)
        self.run = run

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        async def call() -> dict:
            response = await self.wrapped.request(messages, model_settings, model_request_parameters)
            return _record(response)

        record = await self.run.amodel(self.wrapped.model_name, conversation(messages), call)
        if isinstance(record, Notice):  # a model turn is replayed or called again, never decided
            raise RuntimeError(f"model turn {record.seq} came back as a notice: {record.text}")
        return _response(record)

    @asynccontextmanager
    async def request_stream(self, messages, model_settings, model_request_parameters, run_context=None):
        # A streamed request is a step like any other: the whole response is checkpointed, then replayed as
        # events (the wrapped model's own stream would reach the model without a checkpoint).
        response = await self.request(messages, model_settings, model_request_parameters)
        yield CompletedStreamedResponse(response, model_request_parameters=model_request_parameters, replay_events=True)


@dataclass
class DurableToolset(WrapperToolset):
    """A pydantic-ai toolset whose every tool call is a checkpointed step of `run`, with the tool's mode.

    A dataclass, as `WrapperToolset` is: pydantic-ai copies it per run (`dataclasses.replace`)."""

    run: Run
    catalogue: _Catalogue | None = None  # `durable`'s: a tool first listed at run time joins the agent's catalogue

    async def get_tools(self, ctx):
        tools = await self.wrapped.get_tools(ctx)
        if self.catalogue is not None:
            listed = {n: t.tool_def.description for n, t in tools.items()}
            await asyncio.to_thread(self.catalogue.learn, self.run, listed)
        return tools

    async def call_tool(self, name: str, tool_args: dict[str, Any], ctx, tool) -> Any:
        async def call() -> Any:
            try:
                return _jsonable(await self.wrapped.call_tool(name, tool_args, ctx, tool))
            except ModelRetry as retry:
                return {RETRY: retry.message}

        result = await self.run.atool(name, _jsonable(tool_args), call)
        if isinstance(result, Notice):
            return result.text  # the model reads the notice in place of the tool's result
        if isinstance(result, Mapping) and set(result) == {RETRY}:
            raise ModelRetry(result[RETRY])
        return result


class _Catalogue:
    """The agent's tools and their modes: registered by `serve` at start, and again if a new one shows up."""

    def __init__(self, tools: dict[str, str], modes: Mapping[str, str]):
        self.descriptions = dict(tools)
        self.modes = modes
        self.lock = threading.Lock()

    @property
    def tools(self) -> list[Tool]:
        return [Tool(n, self.modes.get(n, DEFAULT_MODE), d or "") for n, d in sorted(self.descriptions.items())]

    def learn(self, run: Run, listed: Mapping[str, str | None]) -> None:
        with self.lock:
            new = {n: d for n, d in listed.items() if n not in self.descriptions}
            if not new or not run.agent:
                return
            self.descriptions.update(new)
            run.console.register_tools(run.agent, self.tools)


def _function_tools(agent: Agent) -> dict[str, str]:
    found: dict[str, str] = {}

    def visit(toolset: AbstractToolset) -> None:
        if isinstance(toolset, FunctionToolset):
            for name, tool in toolset.tools.items():
                found[name] = tool.description or ""

    for toolset in agent.toolsets:
        toolset.apply(visit)
    return found


def _read_before(run: Run, messages: list[ModelMessage]) -> list[Any]:
    """The follow-ups the saved model turn about to be replayed was asked with and this conversation lacks.

    They were read by an earlier run of the chain (acknowledged, so no claim carries them again), where its
    replay ended: the saved request is this conversation plus those user prompts at its end.
    """
    saved = run.upcoming
    if not saved or saved.get("tool") != MODEL or not isinstance(saved.get("args"), Mapping):
        return []
    request = payloads.decode(saved["args"].get("request"))
    if not isinstance(request, Mapping) or not isinstance(request.get("messages"), list):
        return []
    said = [m for m in request["messages"] if m.get("role") != "instructions"]
    now = [m for m in conversation(messages)["messages"] if m.get("role") != "instructions"]
    extra = said[len(now) :]
    if said[: len(now)] != now or not extra or any(m.get("role") != "user" for m in extra):
        return []
    return [m.get("content") for m in extra]


def durable(agent: Agent, *, modes: Mapping[str, str] = {}) -> Callable[[Run], Any]:
    """The function `serve` calls for each run of `agent`: it runs the agent on the run's prompt and follow-ups
    and returns its output. `modes`: the recovery mode of each tool (`replay`, `notify`, `forget`); a tool not
    named is `notify`. The returned function carries the catalogue (`fn.tools`), which `serve` registers."""
    modes = dict(modes)
    for name, mode in modes.items():
        if mode not in MODES:
            raise ValueError(f"tool {name!r}: mode must be one of {', '.join(MODES)}, not {mode!r}")
    if agent.model is None:
        raise ValueError("the agent has no model: give it one (Agent(model, ...)) before making it durable")
    catalogue = _Catalogue({**dict.fromkeys(modes, ""), **_function_tools(agent)}, modes)

    async def run_agent(run: Run) -> Any:
        model = DurableModel(agent.model, run)
        toolsets = [DurableToolset(toolset, run, catalogue) for toolset in agent.toolsets]
        with (
            agent.override(model=model, toolsets=toolsets, tools=[]),
            agent.parallel_tool_call_execution_mode("sequential"),
        ):
            async with agent.iter(run.prompt) as agent_run:
                read = False
                async for node in agent_run:
                    if Agent.is_model_request_node(node) and run.replaying:
                        # Follow-ups an earlier run of the chain read join again where they joined then.
                        earlier = _read_before(run, [*agent_run.all_messages(), node.request])
                        if earlier:
                            agent_run.enqueue(*(UserPromptPart(body) for body in earlier))
                    # Follow-ups join where replay ends, so the saved turns' requests stay what they were.
                    if not read and not run.replaying:
                        read = True
                        followups = await asyncio.to_thread(lambda: run.messages)
                        if followups:
                            agent_run.enqueue(*(UserPromptPart(m.body) for m in followups))
            return _jsonable(agent_run.result.output)

    run_agent.tools = catalogue.tools
    run_agent.__name__ = f"durable_{agent.name or 'agent'}"
    return run_agent
