"""`serve`: claim runs of an agent and run the agent function on each, until SIGTERM or SIGINT.

    serve(console, "coder", agent, tools=[Tool("file_write", "notify")], concurrency=4)

- registers `tools` as the agent's catalogue at start;
- N slots (threads), each claiming one run at a time (`agents: [agent]`, `kinds`), with backoff while
  nothing is queued or the console does not answer;
- each claimed run gets a `Run` with a background heartbeat; `fn(run)` (a function, or a coroutine function
  run in an event loop of its own) returns the run's `output`;
- the first SIGTERM/SIGINT drains: nothing new is claimed, each run ends at its next step boundary and is left
  to its lease (a worker going away is not a Stop; the console's supervisor continues it). A little before
  `drain_seconds` a long call still running is abandoned (`run.abandon`), and at `drain_seconds` the process
  exits whatever is left. A second signal exits at once.

With a `holder` (`workspace.Holder.from_env()`: `CONSOLE_WORKER_WORKSPACES` is set) the worker holds its tasks'
workspaces: its claims say so, each run works in `<root>/<workspace_key>`, a continuation's workspace is checked
before the agent function is called, and while no run is queued the worker does the console's repair jobs on
its disk (`reconcile`, `reissue`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from enum import StrEnum
from types import FrameType
from typing import Any

from recovery_console import payloads
from recovery_console.client import Console, as_tool
from recovery_console.errors import (
    ConsoleUnavailable,
    Diverged,
    LeaseLost,
    Refused,
    RunFailed,
    ShuttingDown,
    StopRequested,
)
from recovery_console.run import Run
from recovery_console.workspace import Holder, export, org_of, reconcile, reissue

log = logging.getLogger("recovery_console")

FATAL_STATUSES = frozenset({400, 401, 403, 404})  # a bad token or a bad filter does not get better by polling


class Outcome(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"
    DIVERGED = "diverged"  # finished failed by the replay check
    ABANDONED = "abandoned"  # lease lost, console gone, or the process cut short: nothing more was written
    SHUTDOWN = "shutdown"  # the worker is exiting; the lease is left to lapse
    REFUSED = "refused"  # the workspace check was not admitted: the console failed the run, nothing ran


def default_label() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def call_agent(fn: Callable[[Run], Any], run: Run) -> Any:
    """`fn(run)`; a coroutine function runs to its end in an event loop of its own."""
    result = fn(run)
    if inspect.isawaitable(result):

        async def wait() -> Any:
            return await result

        return asyncio.run(wait())
    return result


def execute(
    console: Console,
    claim: Mapping[str, Any],
    fn: Callable[[Run], Any],
    *,
    shutdown: threading.Event | None = None,
    abandon: threading.Event | None = None,
    on_boundary: Callable[[str, int, Run], None] | None = None,
    holder: Holder | None = None,
) -> Outcome:
    """Run `fn` on one claimed run, with its heartbeat, and finish the run by how `fn` ended."""
    run = Run(console, claim, shutdown=shutdown, abandon=abandon, on_boundary=on_boundary, holder=holder)
    log.info(
        "claimed run %s (task %s, agent %s, attempt %s, epoch %s, %s, %d saved step(s))",
        run.id,
        run.task,
        run.agent,
        run.attempt,
        run.epoch,
        run.kind,
        run.saved_steps,
    )
    run.start_heartbeat()
    try:
        return conclude(run, fn)
    finally:
        run.stop_heartbeat(wait=2.0)


def conclude(run: Run, fn: Callable[[Run], Any]) -> Outcome:
    """Check the run's workspace, call `fn(run)` and write the run's end: its output, its failure, its stop — or
    nothing, when the check was not admitted or the run diverged (the console ended the run), the lease is lost
    or the worker is shutting down."""
    try:
        if not run.check_workspace():
            return Outcome.REFUSED
        output = call_agent(fn, run)
    except Diverged:
        return Outcome.DIVERGED
    except LeaseLost:
        log.warning("run %s: lease lost; abandoned without further writes", run.id)
        return Outcome.ABANDONED
    except ShuttingDown:
        log.info("run %s: left to its lease (the worker is shutting down)", run.id)
        return Outcome.SHUTDOWN
    except ConsoleUnavailable as exc:
        # Nothing can be written now: the lease lapses and the supervisor classifies what was saved.
        log.error("run %s: the console did not answer, abandoning the run: %s", run.id, exc)
        return Outcome.ABANDONED
    except StopRequested as exc:
        return _finish(run, Outcome.STOPPED, detail=exc.detail)
    except RunFailed as exc:
        return _finish(run, Outcome.FAILED, error_code=exc.error_code, detail=exc.detail)
    except Exception as exc:
        ended = _ended(run)
        if ended is not None:
            return ended
        log.warning("run %s: the agent raised %s: %s", run.id, type(exc).__name__, exc, exc_info=True)
        text = str(exc)
        detail = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
        return _finish(run, Outcome.FAILED, error_code="agent_error", detail=detail)
    except BaseException as exc:
        # SystemExit, KeyboardInterrupt, a crash on purpose: like a killed process, nothing more is written.
        log.error("run %s: the agent was cut short (%s); the lease will lapse", run.id, type(exc).__name__)
        raise
    ended = _ended(run)
    if ended is not None:
        return ended
    try:
        payloads.encode(output)
    except payloads.PayloadError as exc:
        detail = f"The agent's output has no JSON form: {exc}"
        return _finish(run, Outcome.FAILED, error_code="invalid_output", detail=detail)
    return _finish(run, Outcome.SUCCEEDED, output=output)


def _ended(run: Run) -> Outcome | None:
    """How the run already ended, when the agent swallowed the exception that said so."""
    state = run._ended
    if state == "lost":
        return Outcome.ABANDONED
    if state == "diverged":
        return Outcome.DIVERGED
    if state == "shutdown":
        return Outcome.SHUTDOWN
    if state == "stopped":
        return _finish(run, Outcome.STOPPED, detail="Stopped on request.")
    if state == "finished":
        return Outcome.SUCCEEDED
    return None


def _finish(
    run: Run, outcome: Outcome, *, output: Any = None, error_code: str | None = None, detail: str | None = None
) -> Outcome:
    try:
        run.finish(outcome.value, output=output, error_code=error_code, detail=detail)
    except LeaseLost:
        log.warning("run %s: lease lost before it could be finished %s", run.id, outcome.value)
        return Outcome.ABANDONED
    except ConsoleUnavailable as exc:
        log.error("run %s: could not finish %s: %s", run.id, outcome.value, exc)
        return Outcome.ABANDONED
    except Refused as exc:
        log.error("run %s: the console refused to finish it %s: %s", run.id, outcome.value, exc)
        if outcome is Outcome.SUCCEEDED:
            detail = f"The output was refused: {exc.detail}"
            return _finish(run, Outcome.FAILED, error_code="output_refused", detail=detail)
        return Outcome.ABANDONED
    return outcome


def repair(
    console: Console,
    holder: Holder,
    worker: str,
    job: Mapping[str, Any],
    *,
    give_up: Callable[[], bool] | None = None,
) -> bool:
    """Do one repair job on this worker's disk and post what it did; whether it was done (`ok`).

    A job that raises is reported as not done, `worker_error` with the exception's text."""
    try:
        workspace = holder.path_for(job, create=False)
        kind = job.get("kind")
        if kind == "reconcile":
            done = reconcile(workspace, org_of(job.get("workspace_key")), job)
        elif kind == "reissue":
            done = reissue(workspace, holder.root, job)
        elif kind == "retry_export":
            done = export(workspace, str(job.get("destination") or ""), job.get("hint"))
            if not done["ok"]:
                done["error"] = {"code": "export_failed", "detail": done["error"]}
        else:
            raise ValueError(f"unknown repair kind {kind!r}")
    except Exception as exc:
        log.warning("repair %s: failed on this worker: %s", job.get("repair"), exc, exc_info=True)
        text = str(exc)
        error = {"code": "worker_error", "detail": f"{type(exc).__name__}: {text}" if text else type(exc).__name__}
        done = {"ok": False, "result": {}, "error": error}
    log.info(
        "repair %s (%s, task %s): %s",
        job.get("repair"),
        job.get("kind"),
        job.get("task"),
        "done" if done["ok"] else f"not done: {done['error']['detail']}",
    )
    console.repair_result(
        job.get("repair"), worker, ok=done["ok"], result=done["result"], error=done.get("error"), give_up=give_up
    )
    return done["ok"]


def export_job(
    console: Console, holder: Holder, job: Mapping[str, Any], *, give_up: Callable[[], bool] | None = None
) -> bool:
    """Copy a workspace this worker holds to its task's destination and post what the copy did; whether it did."""
    try:
        done = export(holder.path_for(job, create=False), str(job.get("destination") or ""), job.get("hint"))
    except Exception as exc:
        log.warning("export %s: failed on this worker: %s", job.get("export"), exc, exc_info=True)
        done = {"ok": False, "result": {}, "error": f"{type(exc).__name__}: {exc}"}
    log.info("export %s (task %s): %s", job.get("export"), job.get("task"), "done" if done["ok"] else done["error"])
    console.export_result(
        job.get("export"), ok=done["ok"], result=done["result"], error=done.get("error", ""), give_up=give_up
    )
    return done["ok"]


# --- the loop --------------------------------------------------------------------------------------------------


class _Slot:
    def __init__(self, serving: _Serving, label: str) -> None:
        self.serving = serving
        self.label = label
        self.runs = 0
        self.fatal: BaseException | None = None

    def loop(self) -> None:
        s = self.serving
        pause = s.poll_seconds
        while not s.shutdown.is_set():
            give_up = _claim_give_up(s)
            workspaces = s.holder.advert() if s.holder is not None else None
            try:
                claim = s.console.claim(
                    self.label, agents=s.agents, kinds=s.kinds, workspaces=workspaces, give_up=give_up
                )
            except Refused as exc:
                if exc.status in FATAL_STATUSES or s.once:
                    log.error("%s: claim refused: %s", self.label, exc)
                    self.fatal = exc
                    s.shutdown.set()  # the other slots hold the same token and filters
                    return
                log.warning("%s: claim refused, retrying in %.1f s: %s", self.label, pause, exc)
                s.shutdown.wait(pause)
                continue
            except ConsoleUnavailable as exc:
                if s.shutdown.is_set():
                    return  # the failed claim took nothing
                log.error("%s: claim failed: %s", self.label, exc)
                self.fatal = exc
                return
            if claim is None:
                if s.holder is not None and self.repair(give_up):
                    continue  # there may be more work: ask again at once
                if s.once:
                    return
                s.shutdown.wait(pause)
                continue
            self.runs += 1
            try:
                execute(
                    s.console,
                    claim,
                    s.fn,
                    shutdown=s.shutdown,
                    abandon=s.abandon,
                    on_boundary=s.on_boundary,
                    holder=s.holder,
                )
            except Exception:
                # A bug must not kill the slot; the run's lease lapses and the supervisor takes over.
                log.exception("%s: run %s crashed in the worker", self.label, claim.get("run"))
            except BaseException as exc:
                # The agent was cut short (nothing more was written for its run); an interrupt or an exit of
                # the process ends the serving too.
                if isinstance(exc, KeyboardInterrupt | SystemExit):
                    s.shutdown.set()
                    return
            if s.once:
                return

    def repair(self, give_up: Callable[[], bool]) -> bool:
        """Take one repair job, else one export, for this worker's workspaces and do it; whether there was one."""
        s = self.serving
        try:
            job = s.console.repair_claim(self.label, s.holder.label, give_up=give_up)
            if job is not None:
                repair(s.console, s.holder, self.label, job, give_up=give_up)
                return True
            job = s.console.export_claim(self.label, s.holder.label, give_up=give_up)
            if job is not None:
                export_job(s.console, s.holder, job, give_up=give_up)
                return True
        except (Refused, ConsoleUnavailable) as exc:
            log.warning("%s: job: %s", self.label, exc)
        return False


def _claim_give_up(s: _Serving) -> Callable[[], bool]:
    """A claim is retried until shutdown; with `once`, for `retry_seconds` at most (then the worker exits)."""
    started = time.monotonic()

    def give_up() -> bool:
        return s.shutdown.is_set() or (s.once and time.monotonic() - started > s.console.retry_seconds)

    return give_up


class _Serving:
    def __init__(self, **kwargs: Any) -> None:
        self.__dict__.update(kwargs)


def serve(
    console: Console,
    agent: str | None,
    fn: Callable[[Run], Any],
    *,
    tools: Iterable[Any] = (),
    concurrency: int = 1,
    kinds: Iterable[str] | None = None,
    label: str | None = None,
    poll_seconds: float = 2.0,
    drain_seconds: float = 10.0,
    once: bool = False,
    handle_signals: bool = True,
    shutdown: threading.Event | None = None,
    abandon: threading.Event | None = None,
    on_boundary: Callable[[str, int, Run], None] | None = None,
    holder: Holder | None = None,
) -> int:
    """Serve `agent` (None: any agent of the organization) with `fn` until SIGTERM/SIGINT; returns the number
    of runs claimed. With `once`, each slot claims at most one run and returns when none is queued.

    Setting `shutdown` (an Event) from another thread drains as a signal would, without exiting the process.
    `holder`: the workspaces this worker holds (`workspace.Holder.from_env()`), None when the server reads them.
    Raises the `Refused` or `ConsoleUnavailable` that stopped a slot for good (a bad token, a bad filter).
    """
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    # A framework adapter's function carries its agent's catalogue (`recovery_console.pydantic_ai.durable`).
    catalogue = [as_tool(t) for t in (tools or getattr(fn, "tools", ()))]
    if catalogue:
        if not agent:
            raise ValueError("tools are registered for one agent: name it (serve(console, 'coder', fn, tools=...))")
        console.register_tools(agent, catalogue)
        log.info("agent %s: %d tool(s) registered", agent, len(catalogue))
    serving = _Serving(
        console=console,
        fn=fn,
        agents=[agent] if agent else None,
        kinds=list(kinds) if kinds is not None else None,
        poll_seconds=float(poll_seconds),
        once=once,
        shutdown=shutdown if shutdown is not None else threading.Event(),
        abandon=abandon if abandon is not None else threading.Event(),
        on_boundary=on_boundary,
        holder=holder,
    )
    base = (label or "").strip() or default_label()
    restore = _install_signals(serving.shutdown, serving.abandon, float(drain_seconds)) if handle_signals else None
    try:
        log.info("worker %s: %d slot(s) against %s", base, concurrency, console.url)
        slots = [_Slot(serving, f"{base}-{i}") for i in range(1, concurrency + 1)]
        threads = [threading.Thread(target=slot.loop, name=slot.label) for slot in slots]
        for thread in threads:
            thread.start()
        # Join with a timeout so the main thread stays free to handle signals.
        for thread in threads:
            while thread.is_alive():
                thread.join(timeout=0.5)
    finally:
        if restore is not None:
            restore()
    runs = sum(slot.runs for slot in slots)
    log.info("worker %s: exiting after %d run(s)", base, runs)
    for slot in slots:
        if slot.fatal is not None:
            raise slot.fatal
    return runs


def _install_signals(shutdown: threading.Event, abandon: threading.Event, drain: float) -> Callable[[], None] | None:
    """SIGTERM/SIGINT start the drain; a second one exits at once. Returns what puts the old handlers back."""
    if threading.current_thread() is not threading.main_thread():
        return None
    signalled = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if signalled.is_set():
            log.warning("%s again: exiting at once", name)
            os._exit(128 + signum)
        signalled.set()
        log.info("%s: draining — the current step(s) may finish within %g s, then the worker exits", name, drain)
        shutdown.set()
        threading.Thread(target=_drain_deadline, args=(abandon, drain), name="drain", daemon=True).start()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore


def _drain_deadline(abandon: threading.Event, drain: float) -> None:
    """Abandon long calls a little before the drain time, then exit at it if anything still holds on."""
    grace = min(2.0, drain / 3)  # to unwind and exit once a call gave up
    time.sleep(max(0.0, drain - grace))
    log.warning("drain time almost up: abandoning unfinished steps (they record no outcome)")
    abandon.set()
    time.sleep(grace)
    log.error("drain time (%g s) is up: exiting without waiting for the rest", drain)
    logging.shutdown()
    os._exit(1)
