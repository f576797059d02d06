"""Shared by test modules (from test_tools.py): no test module imports another."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from recovery_console import Outcome
from recovery_console import execute as execute_run
from recovery_console.client import Reply
from recovery_console.reference.agent import plan_agent
from recovery_console.reference.faults import Faults


class FakeClient:
    """Records runner calls (the SDK Console's methods); scripted refusals by (method, seq)."""

    def __init__(self, *, refuse: dict | None = None, stop_after: int | None = None) -> None:
        self.calls: list[tuple] = []
        self.refuse = refuse or {}
        self.stop_after = stop_after

    def _maybe_refuse(self, method: str, seq: int | None = None) -> None:
        exc = self.refuse.pop((method, seq), None)
        if exc is not None:
            raise exc

    def heartbeat(self, run, epoch, *, give_up=None):
        self.calls.append(("heartbeat",))
        return Reply({"stop_requested": False}, time.monotonic())

    def plan(self, run, epoch, seq, tool, args, parent_seq=None, *, dispatch=False, give_up=None):
        # Answers `planned` even when asked to dispatch too (as a console before `"dispatch": true` does): the
        # worker then dispatches on its own, and the calls below keep every phase apart.
        self._maybe_refuse("plan", seq)
        self.calls.append(("plan", seq, tool))
        return {"seq": seq, "phase": "planned", "recovery_mode": "replay"}

    def dispatch(self, run, epoch, seq, *, give_up=None):
        self._maybe_refuse("dispatch", seq)
        self.calls.append(("dispatch", seq))
        return {"phase": "dispatched"}

    def complete(
        self, run, epoch, seq, *, ok, result=None, error=None, usage=None, files=None, result_too_large=False,
        give_up=None,
    ):  # fmt: skip
        self._maybe_refuse("complete", seq)
        self.calls.append(("complete", seq, ok, result, error, usage, result_too_large))
        return {"phase": "completed" if ok else "failed", "stop_requested": self.stop_after == seq}

    def finish(self, run, epoch, status, *, error_code=None, detail=None, output=None, diverged=None, give_up=None):
        self._maybe_refuse("finish")
        self.calls.append(("finish", status, error_code))
        return {"status": status}

    def written(self) -> list[tuple]:
        return [c for c in self.calls if c[0] != "heartbeat"]


def claim_for(ws: Path | None, steps: list[dict], **extra) -> dict:
    claim = {"run": 7, "task": 3, "agent": "a", "attempt": 1, "lease_epoch": 1, "input": {"steps": steps}}
    claim.update({"lease_seconds": 180, "heartbeat_seconds": 60})
    claim.update({"reused": [], "messages": []}, **extra)
    if ws is not None:
        claim["workspace"] = str(ws)
    return claim


def execute(client: FakeClient, claim: dict, faults: Faults | None = None) -> Outcome:
    faults = faults or Faults()

    def boundary(point, seq, run):
        faults.check(point, seq, run.attempt, on_hang=run.hang)

    return execute_run(client, claim, plan_agent, shutdown=threading.Event(), on_boundary=boundary)
