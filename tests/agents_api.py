"""An agent run driven through the runner API as the SDK drives it: claim, plan, dispatch, complete, finish.

`Agent` holds one claimed run (its id and epoch) and a runner client; a crash is a worker that stops calling,
then `tests.recovery.engine.lapse()` moves the clock past its lease.
"""

import hashlib
import json
from dataclasses import dataclass

from rest_framework.test import APIClient


def digest(request) -> str:
    return hashlib.sha256(json.dumps(request, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def model_args(request, name: str = "claude") -> dict:
    return {"model": name, "digest": digest(request), "request": request}


def prompt_task(api: APIClient, text: str = "Write the report", agent: str = "coder", **extra) -> dict:
    body = {"title": text, "agent": agent, "input": {"prompt": text}, **extra}
    r = api.post("/api/tasks/", body, format="json")
    assert r.status_code == 201, r.content
    return r.json()


@dataclass
class Agent:
    runner: APIClient
    claim: dict

    @classmethod
    def claims(cls, runner: APIClient, **filters) -> "Agent":
        r = runner.post("/api/runner/claim/", {"worker": "agent-1", **filters}, format="json")
        assert r.status_code == 200, (r.status_code, r.content)
        return cls(runner, r.json())

    @property
    def run(self) -> int:
        return self.claim["run"]

    def post(self, path: str, body: dict):
        return self.runner.post(
            f"/api/runner/runs/{self.run}/{path}", {"epoch": self.claim["lease_epoch"], **body}, format="json"
        )

    def plan(self, seq: int, tool: str, args: dict):
        return self.post("steps/", {"seq": seq, "tool": tool, "args": args})

    def dispatch(self, seq: int):
        r = self.post(f"steps/{seq}/dispatch/", {})
        assert r.status_code == 200, r.content
        return r

    def complete(self, seq: int, result=None, *, ok: bool = True, error: str = "", usage=None):
        body = {"ok": ok, "result": result, "error": error}
        if usage is not None:
            body["usage"] = usage
        r = self.post(f"steps/{seq}/complete/", body)
        assert r.status_code == 200, r.content
        return r

    def call(self, seq: int, tool: str, args: dict, result=None, *, ok: bool = True, usage=None) -> None:
        r = self.plan(seq, tool, args)
        assert r.status_code == 201, r.content
        self.dispatch(seq)
        self.complete(seq, result if result is not None else {"ok": seq}, ok=ok, error="" if ok else "boom",
                      usage=usage)  # fmt: skip

    def turn(self, seq: int, request, response, *, tokens=(100, 20)) -> None:
        """A model turn: its request's digest in the args, the response as the result, its tokens as usage."""
        usage = {"input_tokens": tokens[0], "output_tokens": tokens[1]}
        self.call(seq, "model", model_args(request), {"text": response}, usage=usage)

    def cut_off(self, seq: int, tool: str, args: dict) -> None:
        """Plan and dispatch the call, then nothing more: the worker dies in it."""
        r = self.plan(seq, tool, args)
        assert r.status_code == 201, r.content
        self.dispatch(seq)

    def finish(self, status: str = "succeeded", **extra):
        return self.post("finish/", {"status": status, **extra})
