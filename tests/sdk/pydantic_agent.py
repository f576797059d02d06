"""A pydantic-ai agent put under the console with `durable`, as its own process (`python -m tests.sdk.pydantic_agent`).

The agent is an ordinary pydantic-ai `Agent`: a `FunctionModel` (a deterministic function of the
conversation, no network) and three tools — `note_append` (replay), `send_report` (notify: it "sends" a
report into an outbox outside the workspace, slowly when AGENT_SLOW_SECONDS is set) and `file_check`
(replay). Nothing in it knows about the console: `main()` wraps it with `durable(agent, modes=MODES)`.

Every model call and every tool call appends one JSON line to `<AGENT_DIR>/model.log` / `tools.log`, so tests
count what ran; the tools' side effects are files in `<AGENT_DIR>/outbox`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

MODES = {"note_append": "replay", "send_report": "notify", "file_check": "replay"}
REPORT = "report.md"


def _dir() -> Path:
    return Path(os.environ["AGENT_DIR"])


def log(name: str, entry: dict) -> None:
    with open(_dir() / f"{name}.log", "a") as fh:
        fh.write(json.dumps(entry) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def read_log(directory: Path, name: str) -> list[dict]:
    path = Path(directory) / f"{name}.log"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _parts(messages: list[ModelMessage], kind: str) -> list:
    return [p for m in messages if isinstance(m, ModelRequest) for p in m.parts if p.part_kind == kind]


def think(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The model: the next call, or the final answer, from the conversation so far."""
    users = [p.content for p in _parts(messages, "user-prompt")]
    returns = _parts(messages, "tool-return")
    last = returns[-1] if returns else None
    log("model", {"users": users, "last": last and {"tool": last.tool_name, "content": last.content}})
    done = [r.tool_name for r in returns]
    if not done:
        return ModelResponse(parts=[ToolCallPart("note_append", {"line": "one"})])
    if "send_report" not in done:
        return ModelResponse(
            parts=[TextPart("The notes are written; now the report."), ToolCallPart("send_report", {})]
        )
    if last.tool_name == "send_report" and isinstance(last.content, str) and "verify" in last.content:
        return ModelResponse(
            parts=[TextPart("I check whether it went out."), ToolCallPart("file_check", {"name": REPORT})]
        )
    if last.tool_name == "file_check" and not last.content["exists"]:
        return ModelResponse(parts=[TextPart("It did not go out; I send it again."), ToolCallPart("send_report", {})])
    told = [r.content for r in returns if isinstance(r.content, str)]
    answer = {
        "answer": "The notes and the report are done.",
        "told": told,
        "followups": [f"re: {u}" for u in users[1:]],
    }
    return ModelResponse(parts=[TextPart(json.dumps(answer))])


agent = Agent(FunctionModel(think), name="reporter", output_type=str)


@agent.tool_plain
def note_append(line: str) -> dict:
    """Append a line to the notes."""
    log("tools", {"tool": "note_append", "line": line})
    with open(_dir() / "outbox" / "notes.md", "a") as fh:
        fh.write(line + "\n")
    return {"appended": line}


@agent.tool_plain
def send_report() -> dict:
    """Send the report."""
    log("tools", {"tool": "send_report"})
    time.sleep(float(os.environ.get("AGENT_SLOW_SECONDS") or 0))
    (_dir() / "outbox" / REPORT).write_text("the report\n")
    return {"sent": REPORT}


@agent.tool_plain
def file_check(name: str) -> dict:
    """Whether a file was sent."""
    log("tools", {"tool": "file_check", "name": name})
    return {"exists": (_dir() / "outbox" / name).exists()}


def main() -> None:
    """Serve the agent `coder` until SIGTERM (CONSOLE_URL, CONSOLE_WORKER_TOKEN, AGENT_DIR, AGENT_SLOW_SECONDS)."""
    import logging

    from recovery_console import Console, serve
    from recovery_console.pydantic_ai import durable

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    (_dir() / "outbox").mkdir(parents=True, exist_ok=True)
    with Console(os.environ["CONSOLE_URL"], os.environ["CONSOLE_WORKER_TOKEN"]) as console:
        serve(console, "coder", durable(agent, modes=MODES), poll_seconds=0.2, drain_seconds=3)


if __name__ == "__main__":
    main()
