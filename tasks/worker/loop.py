"""The reference worker loop: claim a run, execute its plan step by step, checkpoint each step.

Every step goes plan → dispatch → tool → complete through the runner API; the
tool runs only after the dispatch is recorded, so a crash anywhere leaves
evidence the supervisor can classify. A background thread renews the lease.

Two ways a run ends early:
- stop (a person's Stop, a pause, the budget): seen in a heartbeat or complete
  reply, honoured at the next step boundary with `finish(stopped)`;
- lost lease (409 `stale_lease`, or no renewal for a whole lease period): the
  worker abandons the run at once and never writes to it again — someone else
  may hold it now.

A shutdown (SIGTERM) lets the current step finish, then leaves the run without
finishing it: its lease lapses and the supervisor continues it like any
interrupted run (a worker going away is not a Stop). When the drain time runs
out first, `abandon` is set: a long tool gives up at once and its step records
no outcome, so it stays `dispatched` and recovery treats it by its mode.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from tasks import payloads
from tasks.batches import Batch, item_args, item_seq, parse_batch
from tasks.worker.client import NotEligible, PayloadTooLarge, RunnerClient, RunnerError, StaleLease
from tasks.worker.faults import Faults
from tasks.worker.tools import ToolContext, ToolError, ToolInterrupted, changed_files, run_tool, stop_grace_for

log = logging.getLogger("tasks.worker")

MIN_HEARTBEAT_SECONDS = 0.05
TOOL_WATCH_SECONDS = 0.1  # how often the executor looks at a running tool's stop and drain
TOOL_UNWIND_SECONDS = 1.0  # how long a tool told to give up has to end by itself before it is left behind
FATAL_STATUSES = frozenset({401, 403})  # a bad token does not get better by polling
# The server refused a step for a reason of the plan itself: the run cannot go on.
REFUSED_STATUSES = frozenset({400, 404, 409, 413})


class Outcome(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"
    ABANDONED = "abandoned"  # lease lost or server gone: nothing more was written
    SHUTDOWN = "shutdown"  # the worker is exiting; the lease is left to lapse


def default_label() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def heartbeat_interval(heartbeat_seconds: float, lease_seconds: float) -> float:
    """The configured interval, but at most a third of the lease so one lost beat is survivable."""
    return max(MIN_HEARTBEAT_SECONDS, min(float(heartbeat_seconds), float(lease_seconds) / 3))


class _LeaseLost(Exception):
    """Raised inside the executor to unwind without another write."""


# --- heartbeat -----------------------------------------------------------------


class Heartbeat:
    """Renews one run's lease in a background thread and reports stop requests and lease loss."""

    def __init__(self, client: RunnerClient, run: int, epoch: int, *, interval: float, lease_seconds: float):
        self.client = client
        self.run = run
        self.epoch = epoch
        self.interval = interval
        self.lease_seconds = float(lease_seconds)
        self.stop_requested = threading.Event()
        self.lost = threading.Event()
        # What a long-running tool watches: set on a stop request or a lost lease.
        self.cancel = threading.Event()
        self._halt = threading.Event()
        # Measured from when the renewal was *sent*, so it is never later than the server's.
        self._deadline = time.monotonic() + self.lease_seconds
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-run-{run}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def halt(self) -> None:
        self._halt.set()

    def request_stop(self) -> None:
        self.stop_requested.set()
        self.cancel.set()

    def mark_lost(self) -> None:
        self.lost.set()
        self.cancel.set()

    def lease_left(self) -> float:
        """Seconds until the lease lapses unless renewed again (as measured here, never later than the server's);
        0 once it is known lost. A write to the run is worth retrying only this long."""
        if self.lost.is_set():
            return 0.0
        return self._deadline - time.monotonic()

    @property
    def lease_gone(self) -> bool:
        """True once the lease is known stale, or was not renewed for a whole lease period."""
        if not self.lost.is_set() and time.monotonic() >= self._deadline:
            log.warning("run %s: lease not renewed for %.0f s; treating it as lost", self.run, self.lease_seconds)
            self.mark_lost()
        return self.lost.is_set()

    def _beat(self) -> None:
        while not self._halt.wait(self.interval):
            sent = time.monotonic()
            try:
                reply = self.client.heartbeat(self.run, self.epoch)
            except StaleLease as exc:
                if not self._halt.is_set():
                    log.warning("run %s: lease is stale (%s); abandoning the run", self.run, exc.detail)
                    self.mark_lost()
                return
            except RunnerError as exc:
                log.warning("run %s: heartbeat failed: %s", self.run, exc)
                continue
            if self._halt.is_set():
                return
            self._deadline = sent + self.lease_seconds
            if reply.get("stop_requested") and not self.stop_requested.is_set():
                log.info("run %s: stop requested (heartbeat)", self.run)
                self.request_stop()


# --- one run ---------------------------------------------------------------------


def _plan_steps(plan: Any) -> list[dict]:
    if not isinstance(plan, Mapping) or not isinstance(plan.get("steps"), list):
        raise ValueError("the run input is not an object with a list `steps`")
    steps = plan["steps"]
    for seq, step in enumerate(steps, start=1):
        if not isinstance(step, Mapping) or not isinstance(step.get("tool"), str) or not step["tool"]:
            raise ValueError(f"step {seq} has no tool name")
        if not isinstance(step.get("args") or {}, Mapping):
            raise ValueError(f"step {seq}: args is not an object")
    return steps


def _reused(claim: Mapping[str, Any]) -> dict[int, Any]:
    return {
        item["seq"]: item.get("result")
        for item in claim.get("reused") or []
        if isinstance(item, Mapping) and isinstance(item.get("seq"), int)
    }


def _usage(result: Any) -> int:
    """1 per completed step unless the tool reports its own usage."""
    usage = result.get("usage") if isinstance(result, Mapping) else None
    if isinstance(usage, int) and not isinstance(usage, bool) and usage >= 0:
        return usage
    return 1


def _short(value: Any, limit: int = 200) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


NESTED_BASE = 100_000  # nested step numbers: parent seq * NESTED_BASE + position (plans hold ≤ 10,000 steps)


class _Early(Exception):
    """A nested step ended the run early (stopped, failed, shut down): unwind to the run loop."""

    def __init__(self, outcome: Outcome):
        super().__init__(outcome)
        self.outcome = outcome


class RunExecutor:
    """Executes one claimed run. `execute()` returns its Outcome and never raises a runner error."""

    def __init__(
        self,
        client: RunnerClient,
        claim: Mapping[str, Any],
        *,
        faults: Faults,
        heartbeat: Heartbeat,
        shutdown: threading.Event,
        abandon: threading.Event | None = None,
        stop_grace: float | None = None,
    ) -> None:
        self.client = client
        self.stop_grace = stop_grace if stop_grace is not None else stop_grace_for(10.0)
        self.claim = claim
        self.run: int = claim["run"]
        self.epoch: int = claim["lease_epoch"]
        self.attempt: int | None = claim.get("attempt")
        self.faults = faults
        self.heartbeat = heartbeat
        self.shutdown = shutdown
        self.abandon = abandon if abandon is not None else threading.Event()
        self.reused = _reused(claim)
        # Unfinished calls whose recovery mode drops them: the continuation skips them.
        self.dropped = {d["seq"] for d in claim.get("dropped") or [] if isinstance(d, Mapping) and "seq" in d}
        # Follow-ups from people; a scripted plan has no use for them, an LLM agent would. The worker has them
        # either way, so it acknowledges them (`_acknowledge`): only then does the console call them read.
        self.messages: list[Any] = list(claim.get("messages") or [])
        self.workspace: str | None = claim.get("workspace")
        self.last_result: Any = None
        self.last_error: str | None = None

    def execute(self) -> Outcome:
        try:
            return self._execute()
        except (_LeaseLost, StaleLease):
            log.warning("run %s: lease lost; abandoned without further writes", self.run)
            return Outcome.ABANDONED
        except RunnerError as exc:
            # The server is unreachable or refused something unexpected: stop writing
            # and let the lease lapse; the supervisor classifies what was saved.
            log.error("run %s: runner API error, abandoning the run: %s", self.run, exc)
            return Outcome.ABANDONED

    def _acknowledge(self) -> None:
        """Tell the console the follow-ups handed over with the claim were received (fenced by the lease)."""
        ids = [m["id"] for m in self.messages if isinstance(m, Mapping) and isinstance(m.get("id"), int)]
        if not ids:
            return
        self.faults.check("before_ack", 1, self.attempt, on_hang=self.heartbeat.halt)
        reply = self.client.ack(self.run, self.epoch, ids)
        log.info("run %s: follow-up(s) %s acknowledged", self.run, reply.get("acknowledged", ids))

    def _execute(self) -> Outcome:
        self._acknowledge()
        if not self.workspace:
            return self._finish(Outcome.FAILED, "no_workspace", "The claim named no workspace directory.")
        if not os.path.isabs(self.workspace) or not os.path.isdir(self.workspace):
            return self._finish(
                Outcome.FAILED, "no_workspace", f"The workspace {self.workspace} is not a directory on this worker."
            )
        try:
            steps = _plan_steps(self.claim.get("input"))
        except ValueError as exc:
            return self._finish(Outcome.FAILED, "invalid_input", f"The run input is not a valid plan: {exc}.")
        for seq, step in enumerate(steps, start=1):
            if (early := self._at_boundary(seq)) is not None:
                return early
            if seq in self.reused:
                log.info(
                    "run %s step %d %s: reused saved result %s", self.run, seq, step["tool"], _short(self.reused[seq])
                )
                continue
            if seq in self.dropped:
                log.info("run %s step %d %s: dropped by its recovery mode", self.run, seq, step["tool"])
                continue
            try:
                early = self._step(seq, step["tool"], dict(step.get("args") or {}))
            except _Early as stop:
                return stop.outcome
            if early is not None:
                return early
        return self._finish(Outcome.SUCCEEDED)

    def _at_boundary(self, seq: int) -> Outcome | None:
        """Between steps: lease lost → abandon; stop requested → finish stopped; shutdown → leave."""
        if self.heartbeat.lease_gone:
            raise _LeaseLost
        if self.heartbeat.stop_requested.is_set():
            return self._finish(Outcome.STOPPED, detail=f"Stopped on request before step {seq}.")
        if self.shutdown.is_set():
            log.info("run %s: worker shutting down before step %d; the lease will lapse", self.run, seq)
            return Outcome.SHUTDOWN
        return None

    def _step(
        self, seq: int, tool: str, args: dict, parent_seq: int | None = None, *, batch_item: bool = False
    ) -> Outcome | None:
        try:
            planned = self.client.plan(self.run, self.epoch, seq, tool, args, parent_seq=parent_seq)
        except StaleLease:
            raise
        except RunnerError as exc:
            if exc.status in REFUSED_STATUSES:
                return self._finish(
                    Outcome.FAILED, "step_refused", f"Step {seq} ({tool}) could not be planned: {exc.detail}"
                )
            raise
        log.info("run %s step %d %s: planned (%s)", self.run, seq, tool, planned.get("recovery_mode", "?"))
        self.faults.check("after_plan", seq, self.attempt, on_hang=self.heartbeat.halt)

        try:
            self.client.dispatch(self.run, self.epoch, seq)
        except NotEligible as exc:
            if exc.reason == "stop_requested":
                log.info("run %s step %d: not dispatched, stop requested", self.run, seq)
                self.heartbeat.request_stop()
                return self._finish(Outcome.STOPPED, detail=f"Stopped on request before step {seq} ran.")
            return self._finish(
                Outcome.FAILED, "step_refused", f"Step {seq} ({tool}) could not be dispatched: {exc.detail}"
            )
        except StaleLease:
            raise
        except RunnerError as exc:
            if exc.status in REFUSED_STATUSES:
                return self._finish(
                    Outcome.FAILED, "step_refused", f"Step {seq} ({tool}) could not be dispatched: {exc.detail}"
                )
            raise
        log.info("run %s step %d %s: dispatched", self.run, seq, tool)
        self.faults.check("after_dispatch", seq, self.attempt, on_hang=self.heartbeat.halt)
        if self.heartbeat.lease_gone:
            raise _LeaseLost

        if tool == "subagent" and parent_seq is None:
            ok, result, error, interrupted = self._subagent(seq, args)
        elif tool == "foreach":
            ok, result, error, interrupted = self._foreach(seq, args, nested=parent_seq is not None)
        elif tool == "task_create":
            ok, result, error, interrupted = self._task_create(args)
        else:
            ok, result, error, interrupted = self._run_tool(tool, args)
        self.last_result = result
        self.last_error = None if ok else (error or "failed")
        self.faults.check("before_complete", seq, self.attempt, on_hang=self.heartbeat.halt)
        if self.heartbeat.lease_gone:
            raise _LeaseLost
        if interrupted and self.heartbeat.stop_requested.is_set():
            # Cut short by Stop: no outcome is recorded, so the step stays
            # dispatched and recovery decides by its mode, as for any cut-off call.
            return self._finish(Outcome.STOPPED, detail=f"Stopped on request during step {seq} ({tool}).")
        if interrupted and self.abandon.is_set():
            # The drain time ran out: nothing is recorded, the step stays dispatched.
            log.warning(
                "run %s step %d %s: abandoned by the worker's shutdown; no outcome recorded, the lease will lapse",
                self.run,
                seq,
                tool,
            )
            return Outcome.SHUTDOWN

        reply = self._complete(seq, ok, result, error, files=changed_files(tool, args) if ok else None)
        if ok:
            log.info("run %s step %d %s: completed %s", self.run, seq, tool, _short(result))
        else:
            log.info("run %s step %d %s: failed: %s", self.run, seq, tool, error)
        if reply.get("stop_requested") and not self.heartbeat.stop_requested.is_set():
            log.info("run %s: stop requested (step %d reply)", self.run, seq)
            self.heartbeat.request_stop()
        if ok or batch_item:  # a batch item's failure is its saved outcome; the batch goes on
            return None
        return self._finish(Outcome.FAILED, "step_failed", f"Step {seq} ({tool}) failed: {error}")

    def _subagent(self, seq: int, args: dict) -> tuple[bool, Any, str | None, bool]:
        """Run a subagent's own plan as steps nested under `seq`, numbered `seq * NESTED_BASE + i`.

        Its calls checkpoint like any other; in a continuation the ones that
        completed are reused, so the subagent resumes under its own identity
        instead of being started again.
        """
        agent = args.get("agent")
        try:
            steps = _plan_steps(args.get("input"))
        except ValueError as exc:
            return False, None, f"subagent input is not a valid plan: {exc}", False
        if not isinstance(agent, str) or not agent:
            return False, None, "subagent needs an `agent` name", False
        if len(steps) >= NESTED_BASE:
            return False, None, f"a subagent plan holds fewer than {NESTED_BASE} steps", False
        results = []
        for i, step in enumerate(steps, start=1):
            nested = seq * NESTED_BASE + i
            if (early := self._at_boundary(nested)) is not None:
                raise _Early(early)
            if nested in self.reused:
                results.append(self.reused[nested])
                continue
            if nested in self.dropped:
                results.append(None)
                continue
            if step["tool"] == "subagent":
                return False, None, "a subagent cannot start another subagent", False
            early = self._step(nested, step["tool"], dict(step.get("args") or {}), parent_seq=seq)
            if early is not None:
                raise _Early(early)
            results.append(self.last_result)
        # Its nested calls were each counted; the call itself adds nothing to the budget.
        return True, {"agent": agent, "run": self.run, "result": results, "usage": 0}, None, False

    def _foreach(self, seq: int, args: dict, *, nested: bool) -> tuple[bool, Any, str | None, bool]:
        """Run `do` once per item, each item a step nested under `seq` (`seq * NESTED_BASE + i`).

        Each item checkpoints plan → dispatch → complete with its own tool's
        recovery mode. In a continuation, saved items are taken as they were
        (a completed item's result, a failed item's failure: it is not retried)
        and dropped items are skipped; the rest run. An item's failure does not
        stop the batch; the foreach fails once every item had its turn. Results
        keep item order. A foreach nested in a group (a subagent's plan) runs
        its items inside its own step instead (see `_foreach_inline`).
        """
        try:
            batch = parse_batch(args)
        except ValueError as exc:
            return False, None, str(exc), False
        if nested:
            return self._foreach_inline(batch)
        saved = self._saved_items()
        results: list[Any] = []
        failed: list[dict] = []
        dropped: list[int] = []
        for position in range(1, len(batch.items) + 1):
            nested_seq = item_seq(seq, position)
            if (early := self._at_boundary(nested_seq)) is not None:
                raise _Early(early)
            if nested_seq in saved:
                entry = saved[nested_seq]
                if entry.get("ok", True) is False:
                    failed.append({"item": position, "error": entry.get("error") or "failed"})
                    results.append(None)
                else:
                    results.append(entry.get("result"))
                log.info(
                    "run %s step %d (item %d of step %d): saved outcome reused", self.run, nested_seq, position, seq
                )
                continue
            if nested_seq in self.dropped:
                log.info("run %s step %d (item %d): dropped by its recovery mode", self.run, nested_seq, position)
                dropped.append(position)
                results.append(None)
                continue
            early = self._step(nested_seq, batch.tool, item_args(batch, position), parent_seq=seq, batch_item=True)
            if early is not None:
                raise _Early(early)
            if self.last_error is not None:
                failed.append({"item": position, "error": self.last_error})
                results.append(None)
            else:
                results.append(self.last_result)
        # Each item was counted as a step; the foreach itself adds nothing to the budget.
        result = {"results": results, "failed": failed, "dropped": dropped, "usage": 0}
        if failed:
            first = failed[0]
            return (
                False,
                result,
                f"{len(failed)} of {len(batch.items)} items failed; item {first['item']}: {first['error']}",
                False,
            )
        return True, result, None, False

    def _foreach_inline(self, batch: Batch) -> tuple[bool, Any, str | None, bool]:
        """A foreach nested in another group runs its items within its own step.

        Its items could not be numbered as checkpoints of their own, so the
        foreach follows its group's recovery boundary: cut off, it is retried
        as a whole (by its own recovery mode), never item by item.
        """
        results: list[Any] = []
        failed: list[dict] = []
        for position in range(1, len(batch.items) + 1):
            if self.heartbeat.lease_gone:
                raise _LeaseLost
            if self.heartbeat.stop_requested.is_set():
                return False, None, f"stopped on request before item {position}", True
            args = item_args(batch, position)
            if batch.tool == "task_create":
                ok, result, error, interrupted = self._task_create(args)
            else:
                ok, result, error, interrupted = self._run_tool(batch.tool, args)
            if interrupted:
                return False, None, error, True
            if not ok:
                failed.append({"item": position, "error": error or "failed"})
            results.append(result if ok else None)
        result = {"results": results, "failed": failed, "dropped": [], "usage": len(batch.items)}
        if failed:
            first = failed[0]
            error = f"{len(failed)} of {len(batch.items)} items failed; item {first['item']}: {first['error']}"
            return False, result, error, False
        return True, result, None, False

    def _saved_items(self) -> dict[int, Mapping[str, Any]]:
        """Saved outcomes carried into this run, by seq: `ok` is false for a failure that stays failed."""
        return {
            item["seq"]: item
            for item in self.claim.get("reused") or []
            if isinstance(item, Mapping) and isinstance(item.get("seq"), int)
        }

    def _task_create(self, args: dict) -> tuple[bool, Any, str | None, bool]:
        """A child task of this run's task, created through the runner API (its side effect is on the server)."""
        title, plan = args.get("title"), args.get("input")
        if not isinstance(title, str) or not title.strip():
            return False, None, "task_create needs a `title`", False
        try:
            created = self.client.create_task(self.run, self.epoch, title, plan, agent=args.get("agent") or "")
        except StaleLease:
            raise
        except RunnerError as exc:
            if exc.status in REFUSED_STATUSES:
                return False, None, f"task_create was refused: {exc.detail}", False
            raise
        return True, {"task": created.get("task")}, None, False

    def _run_tool(self, tool: str, args: dict) -> tuple[bool, Any, str | None, bool]:
        """(ok, result, error, interrupted). Any exception from a tool is a failed step.

        The tool runs in a thread of its own that this one watches, so that even a tool stuck in a call the
        tool itself cannot interrupt gives up on time: after a Stop's grace or at the drain deadline it is
        left behind (a daemon thread) and its step records no outcome.
        """
        ctx = ToolContext(
            workspace=self.workspace or "",
            cancel=self.heartbeat.cancel,
            abandon=self.abandon,
            stop_grace=self.stop_grace,
        )
        box: dict[str, Any] = {}
        done = threading.Event()

        def call() -> None:
            try:
                # The tool boundary of the payload encoding: tools see bytes and any text; checkpoints hold the
                # wire form. A result that has no wire form cannot be checkpointed: a failure, not a crash.
                box["result"] = payloads.encode(run_tool(tool, payloads.decode(args), ctx))
            except BaseException as exc:  # handed to the watching thread
                box["error"] = exc
            finally:
                done.set()

        threading.Thread(target=call, name=f"tool-{tool}-run-{self.run}", daemon=True).start()
        while not done.wait(TOOL_WATCH_SECONDS):
            why = ctx.give_up()
            if why is not None and not done.wait(TOOL_UNWIND_SECONDS):
                log.warning("run %s: tool %s did not end by itself; left behind (%s)", self.run, tool, why)
                return False, None, f"{tool} cut short: {why}", True
        exc = box.get("error")
        if exc is None:
            return True, box.get("result"), None, False
        if isinstance(exc, ToolInterrupted):
            return False, None, str(exc), True
        if isinstance(exc, ToolError):
            return False, None, str(exc), False
        log.debug("run %s: tool %s raised", self.run, tool, exc_info=exc)
        return False, None, f"{type(exc).__name__}: {exc}", False

    def _complete(self, seq: int, ok: bool, result: Any, error: str | None, files: list[str] | None = None) -> dict:
        usage = _usage(result)
        extra = {"files": files} if files else {}
        try:
            return self.client.complete(self.run, self.epoch, seq, ok, result=result, error=error, usage=usage, **extra)
        except PayloadTooLarge:
            log.warning("run %s step %d: result too large to checkpoint; completing without it", self.run, seq)
            return self.client.complete(
                self.run, self.epoch, seq, ok, result=None, error=error, usage=usage, result_too_large=True, **extra
            )

    def _finish(self, outcome: Outcome, error_code: str | None = None, detail: str | None = None) -> Outcome:
        self.client.finish(self.run, self.epoch, outcome.value, error_code=error_code, detail=detail)
        log.info(
            "run %s: finished %s%s%s",
            self.run,
            outcome.value,
            f" ({error_code})" if error_code else "",
            f": {detail}" if detail else "",
        )
        return outcome


def execute_run(
    client: RunnerClient,
    claim: Mapping[str, Any],
    *,
    faults: Faults,
    interval: float,
    lease_seconds: float,
    shutdown: threading.Event,
    abandon: threading.Event | None = None,
    stop_grace: float | None = None,
) -> Outcome:
    """Execute one claimed run with its own heartbeat thread."""
    log.info(
        "claimed run %s (task %s, agent %s, attempt %s, epoch %s, %d reused step(s))",
        claim.get("run"),
        claim.get("task"),
        claim.get("agent"),
        claim.get("attempt"),
        claim.get("lease_epoch"),
        len(claim.get("reused") or []),
    )
    for message in claim.get("messages") or []:
        body = message.get("body") if isinstance(message, Mapping) else message
        log.info("run %s: follow-up message: %s", claim.get("run"), _short(body))
    heartbeat = Heartbeat(client, claim["run"], claim["lease_epoch"], interval=interval, lease_seconds=lease_seconds)
    heartbeat.start()
    abandon = abandon if abandon is not None else threading.Event()

    def lease_left() -> float:
        # The run's writes are retried while its lease is live (a web restart, a short database outage), not a
        # fixed ~7.5 s: giving up leaves a dispatched step, and a notify step becomes a decision for a person.
        # A shutdown whose drain time ran out stops them at once.
        return 0.0 if abandon.is_set() else heartbeat.lease_left()

    try:
        return RunExecutor(
            client.within(lease_left),
            claim,
            faults=faults,
            heartbeat=heartbeat,
            shutdown=shutdown,
            abandon=abandon,
            stop_grace=stop_grace,
        ).execute()
    finally:
        heartbeat.halt()


# --- slots and the loop -------------------------------------------------------------


class _Slot:
    def __init__(self, client: RunnerClient, label: str, *, once: bool, poll_seconds: float, **run_kwargs: Any):
        self.client = client
        self.label = label
        self.once = once
        self.poll_seconds = poll_seconds
        self.run_kwargs = run_kwargs
        self.shutdown: threading.Event = run_kwargs["shutdown"]
        self.runs = 0
        self.fatal: RunnerError | None = None

    def loop(self) -> None:
        while not self.shutdown.is_set():
            try:
                claim = self.client.claim(self.label)
            except RunnerError as exc:
                if self.shutdown.is_set():
                    return  # shutting down: the failed claim took nothing
                if exc.status in FATAL_STATUSES or self.once:
                    log.error("%s: claim failed: %s", self.label, exc)
                    self.fatal = exc
                    if exc.status in FATAL_STATUSES:
                        self.shutdown.set()  # the other slots hold the same token
                    return
                log.warning("%s: claim failed, retrying in %.0f s: %s", self.label, self.poll_seconds, exc)
                self.shutdown.wait(self.poll_seconds)
                continue
            if claim is None:
                if self.once:
                    return
                self.shutdown.wait(self.poll_seconds)
                continue
            self.runs += 1
            try:
                execute_run(self.client, claim, **self.run_kwargs)
            except Exception:
                # A bug must not kill the slot; the run's lease lapses and the supervisor takes over.
                log.exception("%s: run %s crashed in the worker", self.label, claim.get("run"))
            if self.once:
                return


def run_forever(
    client: RunnerClient,
    label: str,
    concurrency: int,
    poll_seconds: float,
    once: bool = False,
    *,
    heartbeat_seconds: float = 30.0,
    lease_seconds: float = 180.0,
    faults: Faults | None = None,
    shutdown: threading.Event | None = None,
    abandon: threading.Event | None = None,
    stop_grace: float | None = None,
) -> int:
    """Run `concurrency` slots (threads), each claiming and executing runs one at a time.

    Slot i claims as `<label>-<i>`. With `once`, each slot claims at most one
    run and returns when there is none. Setting `shutdown` stops claiming and
    ends each slot after its current step; setting `abandon` as well cuts
    that step's long tool short (the drain time is up); after a Stop a tool may go on for `stop_grace`
    seconds before it is cut short. Returns the number of runs claimed;
    raises the RunnerError of a slot that could not claim for good (a rejected
    token; with `once`, any claim failure).
    """
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    shutdown = shutdown if shutdown is not None else threading.Event()
    faults = faults if faults is not None else Faults.from_env()
    slots = [
        _Slot(
            client,
            f"{label}-{i}",
            once=once,
            poll_seconds=poll_seconds,
            faults=faults,
            interval=heartbeat_interval(heartbeat_seconds, lease_seconds),
            lease_seconds=lease_seconds,
            shutdown=shutdown,
            abandon=abandon if abandon is not None else threading.Event(),
            stop_grace=stop_grace,
        )
        for i in range(1, concurrency + 1)
    ]
    threads = [threading.Thread(target=slot.loop, name=slot.label) for slot in slots]
    for thread in threads:
        thread.start()
    # Join with a timeout so the main thread stays free to handle signals.
    for thread in threads:
        while thread.is_alive():
            thread.join(timeout=0.5)
    for slot in slots:
        if slot.fatal is not None:
            raise slot.fatal
    return sum(slot.runs for slot in slots)
