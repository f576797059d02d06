"""A deterministic agent for the SDK tests, in-process or as its own process (`python -m tests.sdk.agents`).

Its "model" is a pure function of the conversation (no network): it walks the plan the task's input carries
(`{"prompt", "plan": [{"name", "args"}, ...]}`), one tool call per turn. A notice `agent_verifies` makes it
check the file the call was about (`file_check`) and write it again if it is missing (a new step); a notice
`performed` is taken as it is. Its final answer lists the notices it read and answers every follow-up in
order. Every model call and every tool call appends one JSON line to `<counts>/model.log` / `tools.log`, so
tests count what ran; the tools' side effects are lines in workspace files.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from recovery_console import Console, Notice, Tool, serve

MODEL = "scripted-1"
TOOLS = [
    Tool("note_append", "notify", "Append a line to a file of the workspace"),
    Tool("slow_write", "notify", "Write a file of the workspace, slowly"),
    Tool("file_check", "replay", "Read a file of the workspace, if it exists"),
]
WRITES = {"note_append", "slow_write"}


class Counts:
    def __init__(self, directory: str | os.PathLike) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)

    def log(self, name: str, entry: dict) -> None:
        with open(self.dir / f"{name}.log", "a") as fh:
            fh.write(json.dumps(entry) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def read(self, name: str) -> list[dict]:
        path = self.dir / f"{name}.log"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def decide(request: dict) -> dict:
    """The model: the next call, or the final answer, from the conversation so far."""
    messages = request["messages"]
    plan = request["plan"]
    usage = {"input_tokens": 100 + 10 * len(messages), "output_tokens": 7}
    last = messages[-1]
    if last["role"] == "tool" and last.get("decision") == "agent_verifies":
        call = last["call"]
        return {"call": {"name": "file_check", "args": {"path": call["args"]["path"]}, "why": "verify"}, "usage": usage}
    if last["role"] == "tool" and last["call"].get("why") == "verify" and not last["content"]["exists"]:
        redo = next(m["call"] for m in reversed(messages) if m["role"] == "tool" and m.get("decision"))
        return {"call": {**redo, "why": "redo"}, "usage": usage}
    done = sum(1 for m in messages if m["role"] == "tool" and m["call"].get("why") == "plan")
    if done < len(plan):
        return {"call": {**plan[done], "why": "plan"}, "usage": usage}
    followups = [m["content"] for m in messages if m["role"] == "user"][1:]
    notices = [m["content"] for m in messages if m["role"] == "tool" and m.get("decision")]
    answer = {
        "answer": f"Done: {done} planned call(s).",
        "notices": notices,
        "followups": [f"re: {body}" for body in followups],
    }
    return {"text": answer, "usage": usage}


def make_tools(run, counts: Counts, slow_seconds: float = 0.0):
    root = Path(run.workspace)

    def note_append(args):
        counts.log("tools", {"tool": "note_append", "args": args, "run": run.id})
        with open(root / args["path"], "a") as fh:
            fh.write(args["line"] + "\n")
        return {"appended": args["line"]}

    def slow_write(args):
        counts.log("tools", {"tool": "slow_write", "args": args, "run": run.id})
        time.sleep(slow_seconds)
        (root / args["path"]).write_text(args["content"])
        return {"bytes": len(args["content"])}

    def file_check(args):
        counts.log("tools", {"tool": "file_check", "args": args, "run": run.id})
        path = root / args["path"]
        return {"exists": path.exists(), "content": path.read_text() if path.exists() else None}

    return {"note_append": note_append, "slow_write": slow_write, "file_check": file_check}


class Crash(BaseException):
    """A process dying mid-call, in-process: the SDK records nothing for the call (as after a SIGKILL)."""


def make_agent(
    counts: Counts,
    *,
    slow_seconds: float = 0.0,
    variant: str = "",
    crash_on_turn: int | None = None,
    hold_before_reading: str = "",
):
    """The agent function for `serve`. `variant="aside"` adds a remark to the conversation after the first
    tool result: on a continuation its next model request is not the saved one (the replay check's case).
    `crash_on_turn=n`: the n-th model call of this agent dies mid-call. `hold_before_reading`: a run carrying
    follow-ups waits for that file to exist before it reads them."""
    calls = []

    def model(request):
        users = [m["content"] for m in request["messages"] if m["role"] == "user"][1:]
        counts.log("model", {"last": request["messages"][-1], "turn": len(request["messages"]), "users": users})
        calls.append(1)
        if crash_on_turn is not None and len(calls) == crash_on_turn:
            raise Crash(f"cut off during model turn {crash_on_turn}")
        return decide(request)

    def agent(run):
        tools = make_tools(run, counts, slow_seconds)
        messages = [{"role": "user", "content": run.prompt}]
        read_messages = False
        while True:
            if not run.replaying and not read_messages:
                # Follow-ups join the conversation where replay ends, so the saved turns' requests stay the same.
                read_messages = True
                if hold_before_reading and run.claim.get("messages"):
                    counts.log("held", {"run": run.id})
                    while not Path(hold_before_reading).exists():
                        time.sleep(0.05)
                messages += [{"role": "user", "content": m.body} for m in run.messages]
            reply = run.model(MODEL, {"messages": messages, "plan": run.input["plan"]}, model)
            if "text" in reply:
                return reply["text"]
            call = reply["call"]
            # The files a call writes are named, so the console keeps the workspace's manifest.
            files = [call["args"]["path"]] if call["name"] in WRITES else None
            result = run.tool(call["name"], call["args"], tools[call["name"]], files=files)
            messages.append({"role": "assistant", "call": call})
            if isinstance(result, Notice):
                messages.append({"role": "tool", "call": call, "content": result.text, "decision": result.decision})
            else:
                messages.append({"role": "tool", "call": call, "content": result})
            if variant == "aside" and len(messages) == 3:
                messages.append({"role": "user", "content": "(an aside the first version never made)"})

    return agent


PLAN = [
    {"name": "note_append", "args": {"path": "notes.md", "line": "one"}},
    {"name": "note_append", "args": {"path": "notes.md", "line": "two"}},
    {"name": "slow_write", "args": {"path": "report.md", "content": "the report\n"}},
]


def main() -> None:
    """`python -m tests.sdk.agents`: serve the agent `coder` until SIGTERM (CONSOLE_URL, CONSOLE_WORKER_TOKEN,
    AGENT_COUNTS, AGENT_SLOW_SECONDS, AGENT_VARIANT, AGENT_HOLD_FILE)."""
    import logging

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    counts = Counts(os.environ["AGENT_COUNTS"])
    agent = make_agent(
        counts,
        slow_seconds=float(os.environ.get("AGENT_SLOW_SECONDS") or 0),
        variant=os.environ.get("AGENT_VARIANT", ""),
        hold_before_reading=os.environ.get("AGENT_HOLD_FILE", ""),
    )
    with Console(os.environ["CONSOLE_URL"], os.environ["CONSOLE_WORKER_TOKEN"]) as console:
        serve(console, "coder", agent, tools=TOOLS, poll_seconds=0.2, drain_seconds=3)


if __name__ == "__main__":
    main()
