"""The reference worker's agent: a scripted plan (`{"steps": [{"tool", "args"}, ...]}`) run on the SDK.

Each step is `run.step(seq, tool, args, call)`: plan → dispatch → the real tool in the task's workspace →
complete, the tool running only after its dispatch is recorded, so a crash anywhere leaves evidence the
supervisor can classify. Top-level steps are numbered by their position in the plan; a subagent's calls and a
`foreach`'s items are steps nested under theirs, numbered `parent * 100000 + i`. In a continuation the saved
steps come back without running (a saved batch item is taken as it was: a failure stays failed) and the
calls a recovery mode dropped are skipped.

How a run ends: every step completed → `succeeded`; a step failed or was refused → `failed` (`step_failed`,
`step_refused`); a stop request → `stopped` at the next step (a long tool cut short by it records no
outcome); a lost lease → nothing more is written; the worker's shutdown → the run is left to its lease (and
when the drain time runs out, a long tool gives up and its step records no outcome).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from typing import Any

from recovery_console.errors import CONTROL, LeaseLost, Refused, RunFailed, StepFailed
from recovery_console.reference.batches import Batch, item_args, item_seq, parse_batch
from recovery_console.reference.tools import (
    ToolContext,
    ToolError,
    ToolInterrupted,
    changed_files,
    run_tool,
    stop_grace_for,
)
from recovery_console.run import Run, _error_text, _short

log = logging.getLogger("recovery_console.reference")

NESTED_BASE = 100_000  # nested step numbers: parent seq * NESTED_BASE + position (plans hold ≤ 10,000 steps)
# The console refused a step for a reason of the plan itself: the run cannot go on.
REFUSED_STATUSES = frozenset({400, 404, 409, 413})
TOOL_WATCH_SECONDS = 0.1  # how often a running tool's stop and drain are looked at
TOOL_UNWIND_SECONDS = 1.0  # how long a tool told to give up has to end by itself before it is left behind
WORDS = {"plan": "planned", "dispatch": "dispatched", "complete": "completed"}


def plan_steps(plan: Any) -> list[dict]:
    if not isinstance(plan, Mapping) or not isinstance(plan.get("steps"), list):
        raise ValueError("the run input is not an object with a list `steps`")
    steps = plan["steps"]
    for seq, step in enumerate(steps, start=1):
        if not isinstance(step, Mapping) or not isinstance(step.get("tool"), str) or not step["tool"]:
            raise ValueError(f"step {seq} has no tool name")
        if not isinstance(step.get("args") or {}, Mapping):
            raise ValueError(f"step {seq}: args is not an object")
    return steps


class PlanAgent:
    """The agent function of the reference worker: runs the run's plan; returns nothing (a plan has no output).

    After a Stop a tool may go on for `stop_grace` seconds (the worker's drain time less its margin), then it
    is cut short and its step records no outcome, so a Stop ends a run within the drain time.
    """

    def __init__(self, *, stop_grace: float | None = None) -> None:
        self.stop_grace = stop_grace if stop_grace is not None else stop_grace_for(10.0)

    def __call__(self, run: Run) -> None:
        Plan(run, stop_grace=self.stop_grace).execute()


plan_agent = PlanAgent()


class _ItemFailed(Exception):
    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


class Plan:
    def __init__(self, run: Run, *, stop_grace: float) -> None:
        self.run = run
        self.stop_grace = stop_grace

    def execute(self) -> None:
        run = self.run
        self._acknowledge()
        if not run.workspace:
            raise RunFailed("no_workspace", "The claim named no workspace directory.")
        if not os.path.isabs(run.workspace) or not os.path.isdir(run.workspace):
            raise RunFailed("no_workspace", f"The workspace {run.workspace} is not a directory on this worker.")
        try:
            steps = plan_steps(run.input)
        except ValueError as exc:
            raise RunFailed("invalid_input", f"The run input is not a valid plan: {exc}.") from None
        for seq, step in enumerate(steps, start=1):
            if seq in run.dropped and run.saved(seq) is None:
                run._boundary(seq)
                log.info("run %s step %d %s: dropped by its recovery mode", run.id, seq, step["tool"])
                continue
            self.step(seq, step["tool"], dict(step.get("args") or {}))

    def _acknowledge(self) -> None:
        """Follow-ups from people: a scripted plan has no use for them, an LLM agent would. The worker has them
        either way, so it reads them at once (reading acknowledges them: only then does the console call them
        read), before its first step."""
        if self.run.claim.get("messages"):
            self.run._hook("before_ack", 1)
        messages = self.run.messages
        for message in messages:
            log.info("run %s: follow-up message from %s: %s", self.run.id, message.author, _short(message.body))
        if messages:
            log.info("run %s: follow-up(s) %s acknowledged", self.run.id, [m.id for m in messages])

    # --- one step ---------------------------------------------------------------------------------------

    def step(self, seq: int, tool: str, args: dict, parent_seq: int | None = None, *, batch_item: bool = False):
        """Run one step; its result. A failure ends the run (`RunFailed`), except a batch item's, which is
        raised as `_ItemFailed` for the batch to keep (the batch goes on)."""
        files = changed_files(tool, args) or None
        try:
            return self.run.step(seq, tool, args, self._call(seq, tool, parent_seq), parent_seq=parent_seq, files=files)
        except CONTROL:
            raise
        except RunFailed:
            raise
        except Refused as exc:
            if exc.during in WORDS and exc.status in REFUSED_STATUSES:
                raise RunFailed(
                    "step_refused", f"Step {seq} ({tool}) could not be {WORDS[exc.during]}: {exc.detail}"
                ) from None
            raise
        except Exception as exc:
            error = exc.error if isinstance(exc, StepFailed) else _error_text(exc)
            if batch_item:
                raise _ItemFailed(error) from None
            raise RunFailed("step_failed", f"Step {seq} ({tool}) failed: {error}") from None

    def _call(self, seq: int, tool: str, parent_seq: int | None):
        def call(args: dict) -> Any:
            if tool == "subagent" and parent_seq is None:
                return self._subagent(seq, args)
            if tool == "foreach":
                return self._foreach(seq, args, nested=parent_seq is not None)
            if tool == "task_create":
                return self._task_create(args)
            return self._watched(tool, args)

        return call

    def _context(self) -> ToolContext:
        return ToolContext(
            workspace=self.run.workspace or "",
            cancel=self.run.cancel,
            abandon=self.run.abandon,
            stop_grace=self.stop_grace,
        )

    def _watched(self, tool: str, args: dict) -> Any:
        """Run a tool in a thread of its own that this one watches, so that even a tool stuck in a call it
        cannot interrupt gives up on time: after a Stop's grace or at the drain deadline it is left behind (a
        daemon thread) and its step records no outcome."""
        ctx = self._context()
        box: dict[str, Any] = {}
        done = threading.Event()

        def work() -> None:
            try:
                box["result"] = run_tool(tool, args, ctx)
            except BaseException as exc:  # handed to the watching thread
                box["error"] = exc
            finally:
                done.set()

        threading.Thread(target=work, name=f"tool-{tool}-run-{self.run.id}", daemon=True).start()
        while not done.wait(TOOL_WATCH_SECONDS):
            why = ctx.give_up()
            if why is not None and not done.wait(TOOL_UNWIND_SECONDS):
                log.warning("run %s: tool %s did not end by itself; left behind (%s)", self.run.id, tool, why)
                raise ToolInterrupted(f"{tool} cut short: {why}")
        if "error" in box:
            raise box["error"]
        return box.get("result")

    # --- groups -----------------------------------------------------------------------------------------

    def _subagent(self, seq: int, args: dict) -> dict:
        """A subagent's own plan as steps nested under `seq`, numbered `seq * NESTED_BASE + i`.

        Its calls checkpoint like any other; in a continuation the ones that completed are reused, so the
        subagent resumes under its own identity instead of being started again.
        """
        agent = args.get("agent")
        try:
            steps = plan_steps(args.get("input"))
        except ValueError as exc:
            raise ToolError(f"subagent input is not a valid plan: {exc}") from None
        if not isinstance(agent, str) or not agent:
            raise ToolError("subagent needs an `agent` name")
        if len(steps) >= NESTED_BASE:
            raise ToolError(f"a subagent plan holds fewer than {NESTED_BASE} steps")
        results = []
        for i, step in enumerate(steps, start=1):
            nested = seq * NESTED_BASE + i
            if nested in self.run.dropped and self.run.saved(nested) is None:
                self.run._boundary(nested)
                results.append(None)
                continue
            if step["tool"] == "subagent" and self.run.saved(nested) is None:
                raise ToolError("a subagent cannot start another subagent")
            results.append(self.step(nested, step["tool"], dict(step.get("args") or {}), parent_seq=seq))
        # Its nested calls were each counted; the call itself adds nothing to the budget.
        return {"agent": agent, "run": self.run.id, "result": results, "usage": 0}

    def _foreach(self, seq: int, args: dict, *, nested: bool) -> dict:
        """`do` once per item, each item a step nested under `seq` (`seq * NESTED_BASE + i`).

        In a continuation, saved items are taken as they were (a completed item's result, a failed item's
        failure: it is not retried) and dropped items are skipped; the rest run. An item's failure does not
        stop the batch; the foreach fails once every item had its turn. Results keep item order. A foreach
        nested in a group (a subagent's plan) runs its items inside its own step (see `_foreach_inline`).
        """
        try:
            batch = parse_batch(args)
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        if nested:
            return self._foreach_inline(batch)
        results: list[Any] = []
        failed: list[dict] = []
        dropped: list[int] = []
        for position in range(1, len(batch.items) + 1):
            nested_seq = item_seq(seq, position)
            if nested_seq in self.run.dropped and self.run.saved(nested_seq) is None:
                self.run._boundary(nested_seq)
                log.info("run %s step %d (item %d): dropped by its recovery mode", self.run.id, nested_seq, position)
                dropped.append(position)
                results.append(None)
                continue
            try:
                results.append(
                    self.step(nested_seq, batch.tool, item_args(batch, position), parent_seq=seq, batch_item=True)
                )
            except _ItemFailed as item:
                failed.append({"item": position, "error": item.error})
                results.append(None)
        # Each item was counted as a step; the foreach itself adds nothing to the budget.
        result = {"results": results, "failed": failed, "dropped": dropped, "usage": 0}
        if failed:
            raise _BatchFailed(result, failed, len(batch.items))
        return result

    def _foreach_inline(self, batch: Batch) -> dict:
        """A foreach nested in another group runs its items within its own step.

        Its items could not be numbered as checkpoints of their own, so the foreach follows its group's
        recovery boundary: cut off, it is retried as a whole (by its own recovery mode), never item by item.
        """
        results: list[Any] = []
        failed: list[dict] = []
        for position in range(1, len(batch.items) + 1):
            if not self.run.lease_live:
                raise LeaseLost(self.run.id)
            if self.run.stop_requested.is_set():
                raise ToolInterrupted(f"stopped on request before item {position}")
            args = item_args(batch, position)
            try:
                if batch.tool == "task_create":
                    results.append(self._task_create(args))
                else:
                    results.append(self._watched(batch.tool, args))
            except ToolInterrupted:
                raise
            except CONTROL:
                raise
            except Exception as exc:
                failed.append({"item": position, "error": _error_text(exc)})
                results.append(None)
        result = {"results": results, "failed": failed, "dropped": [], "usage": len(batch.items)}
        if failed:
            raise _BatchFailed(result, failed, len(batch.items))
        return result

    def _task_create(self, args: dict) -> dict:
        """A child task of this run's task, created through the runner API (its side effect is on the console)."""
        title, plan = args.get("title"), args.get("input")
        if not isinstance(title, str) or not title.strip():
            raise ToolError("task_create needs a `title`")
        run = self.run
        try:
            created = run._write(
                lambda give_up: run.console.create_task(
                    run.id, run.epoch, title, plan, agent=args.get("agent") or "", give_up=give_up
                )
            )
        except Refused as exc:
            if exc.status in REFUSED_STATUSES:
                raise ToolError(f"task_create was refused: {exc.detail}") from None
            raise
        return {"task": created.get("task")}


class _BatchFailed(ToolError):
    """A foreach with failed items: its step fails with its whole result saved (the items' results and
    failures), and the error names the first failed item."""

    def __init__(self, result: dict, failed: list[dict], total: int) -> None:
        first = failed[0]
        super().__init__(
            f"{len(failed)} of {total} items failed; item {first['item']}: {first['error']}", result=result
        )
