"""`Run`: the context an agent function gets for one claimed run.

Every `run.tool(...)` / `run.model(...)` is a step: numbered (the next `seq`), planned, dispatched, called,
completed. On a continuation the claim carries the chain's saved steps: the step the agent asks for is
compared with the saved step of the same number (tool name and the digest of its arguments; for a model turn,
the model's name and the request's digest):

- the same → the saved result is returned and `call` is not called (a saved failure raises `StepFailed`);
- the claim lists it in `notices` (a person decided it, it was handed to the agent to verify, or it was
  dropped) → a `Notice` is returned instead of a result: a sentence for the model in `notice.text`;
- different → the run is finished `failed` (`diverged`) with both calls and `Diverged` is raised; nothing runs.

Between steps the run watches its lease: a stop request (heartbeat or step reply) raises `StopRequested` at
the next step boundary; a lost lease (409 `stale_lease`, or no renewal for a whole lease period) raises
`LeaseLost`, and nothing more is written.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from recovery_console import payloads
from recovery_console.client import MAX_RESULT_BYTES, Console, json_size
from recovery_console.errors import (
    CONTROL,
    ConsoleUnavailable,
    Diverged,
    Interrupted,
    LeaseLost,
    Refused,
    RunFailed,
    ShuttingDown,
    StepFailed,
    StopRequested,
    ToolError,
)
from recovery_console.workspace import Holder, org_of, step_report, validate

log = logging.getLogger("recovery_console")

MODEL = "model"  # the reserved tool name of a model turn
MAX_BATCH = 64  # steps the console plans in one request
MODEL_REQUEST_LIMIT = 256 * 1024  # a model request larger than this is kept by its digest alone
MIN_HEARTBEAT_SECONDS = 0.05
DEFAULT_HEARTBEAT_SECONDS = 30.0


def heartbeat_interval(heartbeat_seconds: float, lease_seconds: float) -> float:
    """The console's interval, but at most a third of the lease, so one lost beat is survivable."""
    return max(MIN_HEARTBEAT_SECONDS, min(float(heartbeat_seconds), float(lease_seconds) / 3))


# --- what a run carries -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Message:
    """A follow-up a person wrote; the continuation carries it to the agent."""

    id: int
    author: str | None
    created_at: str | None
    body: str

    def __str__(self) -> str:
        return self.body


@dataclass(frozen=True)
class Notice:
    """What the agent gets instead of a result for a step with no saved result that someone decided.

    `decision`: `performed` (a person recorded that the call happened, with a note), `agent_verifies` (its
    outcome is unknown and the agent checks before repeating it; `decided_by` is None when the agent's own
    setting handed it over) or `dropped` (cut off, dropped by its tool's `forget` mode). `text` is a sentence
    meant for the model, in place of the tool's result. A repeat the agent then asks for is a new step.
    """

    seq: int
    tool: str
    args: Any
    decision: str
    decided_by: str | None
    decided_at: str | None
    note: str
    text: str

    def __str__(self) -> str:
        return self.text


def _call_words(tool: str, args: Any, limit: int = 160) -> str:
    """`file_write path=notes.md, content="…"`: a call as a model can read it, cut to `limit` characters."""
    if isinstance(args, Mapping):
        parts = []
        for key, value in args.items():
            shown = value if isinstance(value, str) else json.dumps(payloads.encode(value), ensure_ascii=False)
            if isinstance(value, str) and (len(value) > 40 or not value.isprintable() or " " in value):
                shown = json.dumps(value[:40] + ("…" if len(value) > 40 else ""), ensure_ascii=False)
            parts.append(f"{key}={shown}")
        words = f"{tool} {', '.join(parts)}" if parts else tool
    else:
        words = tool
    return words if len(words) <= limit else words[: limit - 1] + "…"


def notice_text(tool: str, args: Any, decision: str, decided_by: str | None, note: str) -> str:
    """The sentence for the model, when the console did not send its own (`notices[*].text`)."""
    call = _call_words(tool, args)
    note = (note or "").strip()
    if decision == "performed":
        return f"A person ({decided_by or 'someone'}) recorded that this call ({call}) happened" + (
            f": {note}" if note else "."
        )
    if decision == "dropped":
        return (
            f"This call ({call}) was interrupted and dropped by its recovery mode; it may or may not have happened "
            "and it is not run again unless you ask for it anew."
        )
    return (
        f"This call ({call}) was interrupted and its outcome is unknown; verify the current state before repeating it."
    )


def _usage(result: Any) -> int | dict:
    """What a completed step reports: the result's own `usage` (units, or tokens in and out), else 1."""
    usage = result.get("usage") if isinstance(result, Mapping) else None
    if isinstance(usage, int) and not isinstance(usage, bool) and usage >= 0:
        return usage
    if isinstance(usage, Mapping):
        tokens = {
            k: usage[k]
            for k in ("input_tokens", "output_tokens")
            if isinstance(usage.get(k), int) and not isinstance(usage.get(k), bool) and usage[k] >= 0
        }
        if len(tokens) == 2:
            cost = usage.get("cost")
            if isinstance(cost, int | float) and not isinstance(cost, bool) and cost >= 0:
                tokens["cost"] = cost
            return tokens
    return 1


def _takes_argument(call: Callable) -> bool:
    """Whether `call` has a required positional parameter (then it gets the args / request)."""
    try:
        signature = inspect.signature(call)
    except (TypeError, ValueError):
        return True
    for parameter in signature.parameters.values():
        if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
            if parameter.default is parameter.empty:
                return True
        elif parameter.kind == parameter.VAR_POSITIONAL:
            return False
    return False


def _invoke(call: Callable | None, value: Any) -> Any:
    if call is None:
        return None
    spec = getattr(call, "__recovery_tool__", None)
    if spec is not None and isinstance(value, Mapping):
        return call(**value)
    return call(value) if _takes_argument(call) else call()


# --- the step machinery ---------------------------------------------------------------------------------------


@dataclass
class _Pending:
    """A step this process planned (by `plan_ahead` or on its own) and has not finished."""

    seq: int
    tool: str
    args: Any  # the wire form that was planned
    fingerprint: str
    parent_seq: int | None = None
    planned: bool = False
    taken: bool = False


@dataclass
class _Replay:
    value: Any


@dataclass
class _Begun:
    seq: int
    tool: str
    args: Any
    parent_seq: int | None
    files: list[str] | None = field(default=None)


class Run:
    """One claimed run: what it is (`id`, `task`, `agent`, `attempt`, `kind`, `input`, `prompt`, `workspace`,
    `messages`) and how the agent does its steps (`tool`, `model`, `atool`, `amodel`, `plan_ahead`)."""

    def __init__(
        self,
        console: Console,
        claim: Mapping[str, Any],
        *,
        shutdown: threading.Event | None = None,
        abandon: threading.Event | None = None,
        on_boundary: Callable[[str, int, Run], None] | None = None,
        holder: Holder | None = None,
    ) -> None:
        self.console = console
        self.claim = claim
        self.id: int = claim["run"]
        self.task: int | None = claim.get("task")
        self.agent: str | None = claim.get("agent")
        self.attempt: int | None = claim.get("attempt")
        self.epoch: int = claim["lease_epoch"]
        # A worker holding workspaces works in its own `<root>/<workspace_key>` and reports what its steps change;
        # the claim's `workspace` is the server's path, which need not exist on this host.
        self.holder = holder if holder is not None and claim.get("workspace_key") else None
        self._no_workspace: str | None = None  # why the held workspace could not be made (the run then fails)
        try:
            self.workspace: str | None = self.holder.path_for(claim) if self.holder else claim.get("workspace")
        except (ValueError, OSError) as exc:
            self.workspace = None
            self._no_workspace = f"The workspace {claim.get('workspace_key')!r} cannot be made on this worker: {exc}"
        self.input: Any = payloads.decode(claim.get("input"))
        kind = claim.get("kind")
        if kind not in ("plan", "agent"):
            kind = "agent" if isinstance(self.input, Mapping) and "prompt" in self.input else "plan"
        self.kind: str = kind
        self.next_seq: int | None = claim.get("next_seq")
        self.shutdown = shutdown if shutdown is not None else threading.Event()
        # Set when the drain time is up: a long call gives up at once and its step records no outcome.
        self.abandon = abandon if abandon is not None else threading.Event()
        # Set on a stop request, a lost lease or abandon: what a long call watches (then raises `Interrupted`).
        self.cancel = threading.Event()
        self._on_boundary = on_boundary

        self._saved: dict[int, Mapping[str, Any]] = {}
        for item in claim.get("reused") or []:
            if isinstance(item, Mapping) and isinstance(item.get("seq"), int):
                self._saved[item["seq"]] = item
        self._notices: dict[int, Mapping[str, Any]] = {}
        for item in claim.get("notices") or []:
            if isinstance(item, Mapping) and isinstance(item.get("seq"), int):
                self._notices[item["seq"]] = item
        # A scripted plan's unfinished calls that their recovery mode drops (agent runs get notices instead).
        self.dropped = frozenset(
            d["seq"] for d in claim.get("dropped") or [] if isinstance(d, Mapping) and isinstance(d.get("seq"), int)
        )
        self._raw_messages = [m for m in claim.get("messages") or [] if isinstance(m, Mapping)]
        self._messages: list[Message] | None = None

        self._lock = threading.RLock()
        self._seq = 0  # the last top-level seq handed out
        self._pending: list[_Pending] = []
        # Plans go to the console in seq order (it refuses a seq that skips ahead): the highest seq settled.
        self._plan_turn = threading.Condition(self._lock)
        self._planned_upto = 0
        self._settled: set[int] = set()

        self.stop_requested = threading.Event()
        self._lost = threading.Event()
        self._ended: str | None = None  # stopped | diverged | lost | shutdown | refused | finished

        self._lease_seconds = _lease_seconds(claim)
        self._deadline = float(claim.get("_sent", time.monotonic())) + self._lease_seconds
        self._heartbeat_seconds = float(claim.get("heartbeat_seconds") or DEFAULT_HEARTBEAT_SECONDS)
        self._halt = threading.Event()
        self._finishing = False
        self._beat: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"<Run {self.id} task={self.task} agent={self.agent} attempt={self.attempt} kind={self.kind}>"

    # --- what the run is ---------------------------------------------------------------------------------

    @property
    def prompt(self) -> str | None:
        return self.input.get("prompt") if isinstance(self.input, Mapping) else None

    @property
    def messages(self) -> list[Message]:
        """The follow-ups this run carries, oldest first. The first read acknowledges them to the console
        (from then on, and not before, the task page says they were read by the agent)."""
        with self._lock:
            if self._messages is None:
                messages = [
                    Message(
                        id=m.get("id"),
                        author=m.get("author"),
                        created_at=m.get("created_at"),
                        body=m.get("body") or "",
                    )
                    for m in self._raw_messages
                ]
                ids = [m.id for m in messages if isinstance(m.id, int)]
                if ids:
                    self._check_lease()
                    self._write(lambda give_up: self.console.ack(self.id, self.epoch, ids, give_up=give_up))
                self._messages = messages
            return list(self._messages)

    @property
    def replaying(self) -> bool:
        """True while the next step is a saved one (or a notice). An agent adds new input to its conversation
        (the follow-ups of `messages`) only once replay is over, so the saved turns' requests stay the same."""
        with self._lock:
            following = self._seq + 1
            saved = self._saved.get(following)
            return (saved is not None and saved.get("parent_seq") is None) or following in self._notices

    @property
    def upcoming(self) -> Mapping[str, Any] | None:
        """The saved step (or notice) the agent's next top-level call will be compared with, if any: its
        `tool` and `args` (a model turn's args hold the request it was asked with)."""
        with self._lock:
            following = self._seq + 1
            saved = self._saved.get(following)
            if saved is not None and saved.get("parent_seq") is None:
                return saved
            return self._notices.get(following)

    @property
    def saved_steps(self) -> int:
        """How many saved steps (and notices) this continuation carries for the agent to replay."""
        return len(self._saved) + len(self._notices)

    # --- steps ---------------------------------------------------------------------------------------------

    def tool(self, name: Any, args: Mapping[str, Any] | None = None, call: Callable | None = None, *, files=None):
        """Run one tool call as a checkpointed step and return its result (or a `Notice`).

        `name` is the tool's name, or a function decorated with `@tool` (then it is also the call, given the
        args as keyword arguments). `call` is called with `args` if it takes a required positional parameter,
        else with none; it runs only when nothing is saved for this step. If it raises, the step is saved as
        failed with the exception's text and the exception is raised again. `files` (workspace-relative paths
        the call changes) lets the console keep the workspace's manifest.
        """
        name, call = _tool_and_call(name, call)
        args = {} if args is None else args
        seq = self._take_seq(name, args)
        begun = self._begin(seq, name, args, None, files)
        if isinstance(begun, _Replay):
            return begun.value
        return self._end(begun, *self._call(begun, call, args))

    def step(
        self,
        seq: int,
        tool: str,
        args: Mapping[str, Any] | None = None,
        call: Callable | None = None,
        *,
        parent_seq: int | None = None,
        files: list[str] | None = None,
    ):
        """`tool` with the step's number given: a scripted plan's position, or a call nested under step
        `parent_seq` (numbered `parent_seq * 100000 + i`). Saved steps are replayed and compared the same way."""
        tool, call = _tool_and_call(tool, call)
        args = {} if args is None else args
        if parent_seq is None:
            with self._lock:
                self._seq = max(self._seq, seq)
        begun = self._begin(seq, tool, args, parent_seq, files)
        if isinstance(begun, _Replay):
            return begun.value
        return self._end(begun, *self._call(begun, call, args))

    def saved(self, seq: int) -> Mapping[str, Any] | None:
        """The saved step `seq` this continuation carries (`result`, `ok`, `error`, `tool`, `args`), if any."""
        return self._saved.get(seq)

    def model(self, name: str, request: Any, call: Callable | None = None):
        """One model turn as a checkpointed step: `call(request)` returns the model's response.

        The step's arguments are the model's name and the sha256 digest of the canonical request (and the
        request itself, if it is not large). A completed turn is never called again: on a continuation the
        saved response comes back. A response may report `usage` as `{"input_tokens", "output_tokens",
        "cost"?}`; the console counts it.
        """
        args = self._model_args(name, request)
        seq = self._take_seq(MODEL, args)
        begun = self._begin(seq, MODEL, args, None, None)
        if isinstance(begun, _Replay):
            return begun.value
        return self._end(begun, *self._call(begun, call, request))

    async def atool(
        self, name: Any, args: Mapping[str, Any] | None = None, call: Callable | None = None, *, files=None
    ):
        """`tool` for async agents: `call` may be a coroutine function. Calls started together (e.g. with
        `asyncio.gather`) are numbered in the order they were started; plan them with `plan_ahead` first."""
        name, call = _tool_and_call(name, call)
        args = {} if args is None else args
        seq = self._take_seq(name, args)
        await self._await_plan_turn(seq)
        begun = await asyncio.to_thread(self._begin, seq, name, args, None, files)
        if isinstance(begun, _Replay):
            return begun.value
        outcome = await self._acall(begun, call, args)
        return await asyncio.to_thread(self._end, begun, *outcome)

    async def amodel(self, name: str, request: Any, call: Callable | None = None):
        """`model` for async agents: `call` may be a coroutine function."""
        args = self._model_args(name, request)
        seq = self._take_seq(MODEL, args)
        await self._await_plan_turn(seq)
        begun = await asyncio.to_thread(self._begin, seq, MODEL, args, None, None)
        if isinstance(begun, _Replay):
            return begun.value
        outcome = await self._acall(begun, call, request)
        return await asyncio.to_thread(self._end, begun, *outcome)

    def plan_ahead(self, calls: Iterable[tuple[str, Mapping[str, Any]]]) -> None:
        """Plan one model turn's tool calls in one request; the `tool()` calls that follow with the same tool
        and args take these planned steps, in any order (e.g. in parallel). On a continuation the calls that
        are saved are compared at once (a different path is refused before anything runs)."""
        entries = []
        for name, args in calls:
            name, _ = _tool_and_call(name, None)
            entries.append((name, {} if args is None else args))
        if not entries:
            return
        with self._lock:
            self._boundary(self._seq + 1)
            if any(not p.taken for p in self._pending):
                raise RuntimeError("plan_ahead: the calls planned before have not all been made yet")
            pending = []
            for name, args in entries:
                self._seq += 1
                wire = _wire_args(args)
                pending.append(_Pending(self._seq, name, wire, _fingerprint(name, wire)))
            self._pending = pending
        # Saved and noticed steps are compared now; the rest are planned together.
        for p in pending:
            saved = self._saved_entry(p.seq)
            if saved is not None:
                self._compare(p.seq, saved, p.tool, p.args)
        fresh = [p for p in pending if self._saved_entry(p.seq) is None]
        for start in range(0, len(fresh), MAX_BATCH):
            chunk = fresh[start : start + MAX_BATCH]
            with self._plan_turn:
                while self._planned_upto < chunk[0].seq - 1:
                    self._plan_turn.wait(0.05)
            try:
                steps = [{"seq": p.seq, "tool": p.tool, "args": p.args} for p in chunk]
                self._write(
                    lambda give_up, steps=steps: self.console.plan_batch(self.id, self.epoch, steps, give_up=give_up)
                )
                for p in chunk:
                    p.planned = True
                    log.info("run %s step %d %s: planned (with its turn)", self.id, p.seq, p.tool)
            finally:
                self._settle_plan(chunk[-1].seq)
        with self._plan_turn:
            for p in pending:
                if self._saved_entry(p.seq) is not None:
                    self._settle_plan_locked(p.seq)

    async def aplan_ahead(self, calls: Iterable[tuple[str, Mapping[str, Any]]]) -> None:
        """`plan_ahead` for async agents."""
        await asyncio.to_thread(self.plan_ahead, list(calls))

    # --- inside a step --------------------------------------------------------------------------------------

    def _model_args(self, name: str, request: Any) -> dict:
        if not isinstance(name, str) or not name:
            raise ValueError("a model turn needs the model's name")
        wire = payloads.encode(request)
        args: dict[str, Any] = {"model": name, "digest": payloads.digest(request)}
        if json_size(wire) <= MODEL_REQUEST_LIMIT:
            args["request"] = wire
        return args

    def _take_seq(self, tool: str, args: Any) -> int:
        """The seq of this call: a step `plan_ahead` reserved for it, else the next number."""
        with self._lock:
            if self._pending and not all(p.taken for p in self._pending):
                wire = _wire_args(args)
                fingerprint = _fingerprint(tool, wire)
                for p in self._pending:
                    if not p.taken and p.fingerprint == fingerprint:
                        p.taken = True
                        return p.seq
                waiting = ", ".join(p.tool for p in self._pending if not p.taken)
                raise RuntimeError(f"{tool}: this call was not among the calls planned ahead ({waiting} still to come)")
            self._seq += 1
            return self._seq

    def _planned_step(self, seq: int) -> _Pending | None:
        return next((p for p in self._pending if p.seq == seq and p.planned), None)

    def _saved_entry(self, seq: int) -> Mapping[str, Any] | None:
        return self._saved.get(seq) or self._notices.get(seq)

    def _begin(self, seq: int, tool: str, args: Any, parent_seq: int | None, files: list[str] | None):
        """Up to the call: replay what is saved, or plan and dispatch a new step."""
        try:
            self._boundary(seq)
            wire = _wire_args(args)
            saved = self._saved.get(seq)
            notice = self._notices.get(seq)
            if saved is not None or notice is not None:
                self._compare(seq, saved or notice, tool, wire)
                if saved is not None:
                    return _Replay(self._replayed(seq, tool, saved))
                return _Replay(self._notice(seq, notice))
            dispatched = False
            try:
                if self._planned_step(seq) is None:
                    self._wait_plan_turn(seq, parent_seq)
                    run, epoch = self.id, self.epoch
                    # Planned and dispatched in one request, right before the call, as the two would be one after
                    # the other; with fault injection (a hook between them) they stay two requests.
                    both = self._on_boundary is None
                    extra = {"dispatch": True} if both else {}
                    reply = self._write(
                        lambda give_up: self.console.plan(
                            run, epoch, seq, tool, wire, parent_seq, give_up=give_up, **extra
                        ),
                        during="plan",
                    )
                    dispatched = both and reply.get("phase") == "dispatched"  # an older console only plans
                    if parent_seq is None:
                        self._settle_plan(seq)
                    log.info("run %s step %d %s: planned (%s)", self.id, seq, tool, reply.get("recovery_mode", "?"))
                self._hook("after_plan", seq)
                if not dispatched:
                    self._write(
                        lambda give_up: self.console.dispatch(self.id, self.epoch, seq, give_up=give_up),
                        during="dispatch",
                    )
            except Refused as exc:
                if exc.reason == "stop_requested":
                    log.info("run %s step %d: not dispatched, stop requested", self.id, seq)
                    self._request_stop()
                    self._ended = "stopped"
                    raise StopRequested(self.id, seq) from None
                raise
            log.info("run %s step %d %s: dispatched", self.id, seq, tool)
            self._hook("after_dispatch", seq)
            self._check_lease()
            return _Begun(seq, tool, args, parent_seq, files)
        finally:
            if parent_seq is None:
                self._settle_plan(seq)

    def _call(self, begun: _Begun, call: Callable | None, value: Any) -> tuple[bool, Any, BaseException | None]:
        try:
            return True, _invoke(call, value), None
        except CONTROL:
            raise  # a step nested in this call ended the run's work: this call records nothing either
        except Exception as exc:
            return False, None, exc

    async def _acall(self, begun: _Begun, call: Callable | None, value: Any) -> tuple[bool, Any, BaseException | None]:
        try:
            result = _invoke(call, value)
            if inspect.isawaitable(result):
                result = await result
            return True, result, None
        except CONTROL:
            raise
        except Exception as exc:
            return False, None, exc

    def _end(self, begun: _Begun, ok: bool, result: Any, exc: BaseException | None):
        """After the call: record its outcome (or nothing, when it was interrupted or the lease is gone)."""
        seq, tool = begun.seq, begun.tool
        kept = None
        self._hook("before_complete", seq)
        if isinstance(exc, Interrupted):
            # Cut short: no outcome is recorded; the step stays dispatched and recovery decides by its mode.
            self._check_lease()
            if self.stop_requested.is_set():
                self._ended = "stopped"
                raise StopRequested(self.id, seq, during=tool) from exc
            if self.abandon.is_set() or self.shutdown.is_set():
                log.warning(
                    "run %s step %d %s: abandoned by the worker's shutdown; no outcome recorded, the lease will lapse",
                    self.id,
                    seq,
                    tool,
                )
                self._ended = "shutdown"
                raise ShuttingDown(self.id, seq) from exc
        self._check_lease()
        wire, error, too_large = None, None, False
        if ok:
            try:
                wire = payloads.encode(result)
            except payloads.PayloadError as problem:
                ok, error = False, f"the result has no JSON form: {problem}"
            else:
                if json_size(wire) > MAX_RESULT_BYTES:
                    log.warning("run %s step %d: result too large to checkpoint; completing without it", self.id, seq)
                    wire, too_large = None, True
        else:
            error = _error_text(exc)
            kept = exc.result if isinstance(exc, ToolError) else None
            if kept is not None:
                try:
                    wire = payloads.encode(kept)
                except payloads.PayloadError:
                    kept = None
        usage = _usage(result) if ok else (_usage(kept) if kept is not None else 1)
        files = begun.files if ok else None
        changed = self._workspace_changes(begun, ok)

        # A held workspace's changes go with the completion; without a holder the call is as it always was.
        held = {"workspace": changed} if changed is not None else {}

        def complete(wire: Any, too_large: bool) -> dict:
            return self._write(
                lambda give_up: self.console.complete(
                    self.id,
                    self.epoch,
                    seq,
                    ok=ok,
                    result=wire,
                    error=error,
                    usage=usage,
                    files=files,
                    result_too_large=too_large,
                    give_up=give_up,
                    **held,
                ),
                during="complete",
            )

        try:
            reply = complete(wire, too_large)
        except Refused as refused:
            if refused.status != 413 or wire is None:
                raise
            log.warning("run %s step %d: result too large to checkpoint; completing without it", self.id, seq)
            wire, too_large = None, True
            reply = complete(None, True)
        if ok:
            log.info("run %s step %d %s: completed %s", self.id, seq, tool, _short(wire))
        else:
            log.info("run %s step %d %s: failed: %s", self.id, seq, tool, error)
        if reply.get("stop_requested") and not self.stop_requested.is_set():
            log.info("run %s: stop requested (step %d reply)", self.id, seq)
            self._request_stop()
        if exc is not None:
            raise exc
        if not ok:
            raise StepFailed(error or "failed", seq=seq, tool=tool)
        return result if too_large else payloads.decode(wire)

    def _workspace_changes(self, begun: _Begun, ok: bool) -> dict | None:
        """What the step changed in the workspace this worker holds, read now (None: it holds none, or the step
        changes no file). Read once, before the completion and its retries."""
        if self.holder is None or begun.tool == MODEL:
            return None
        org = org_of(self.claim["workspace_key"])
        files = begun.files if ok else None
        return step_report(self.workspace, org, begun.tool, begun.args, files, ok, label=self.holder.label)

    def _replayed(self, seq: int, tool: str, saved: Mapping[str, Any]) -> Any:
        if saved.get("ok", True) is False:
            log.info("run %s step %d %s: saved failure replayed", self.id, seq, tool)
            raise StepFailed(saved.get("error") or "failed", seq=seq, tool=tool)
        log.info("run %s step %d %s: saved result reused", self.id, seq, tool)
        return payloads.decode(saved.get("result"))

    def _notice(self, seq: int, item: Mapping[str, Any]) -> Notice:
        args = payloads.decode(item.get("args"))
        tool = item.get("tool") or ""
        decision = item.get("decision") or ""
        decided_by = item.get("decided_by")
        note = item.get("note") or ""
        log.info("run %s step %d %s: notice (%s)", self.id, seq, tool, decision)
        return Notice(
            seq=seq,
            tool=tool,
            args=args,
            decision=decision,
            decided_by=decided_by,
            decided_at=item.get("decided_at"),
            note=note,
            # The console's own sentence when it sends one: the card then says exactly what the model was told.
            text=item.get("text") or notice_text(tool, args, decision, decided_by, note),
        )

    def _compare(self, seq: int, saved: Mapping[str, Any], tool: str, wire: Any) -> None:
        """The replay check: the asked call must be the saved one, else the run is refused as diverged."""
        saved_tool, saved_args = saved.get("tool"), saved.get("args")
        if saved_tool is None:
            return  # a console that does not carry saved calls: nothing to compare with
        if _fingerprint(saved_tool, saved_args) == _fingerprint(tool, wire):
            return
        diverged = {
            "seq": seq,
            "saved": {"tool": saved_tool, "args": saved_args},
            "asked": {"tool": tool, "args": wire},
        }
        log.warning("run %s step %d: diverged: saved %s, asked %s", self.id, seq, saved_tool, tool)
        self._ended = "diverged"
        self._finishing = True
        detail = (
            f"Step {seq}: the agent asked for {_call_words(tool, payloads.decode(wire))} where the saved step is "
            f"{_call_words(saved_tool, payloads.decode(saved_args))}; nothing was run."
        )
        self._write(
            lambda give_up: self.console.finish(
                self.id, self.epoch, "failed", error_code="diverged", detail=detail, diverged=diverged, give_up=give_up
            )
        )
        raise Diverged(seq, diverged["saved"], diverged["asked"])

    # --- the workspace check -----------------------------------------------------------------------------

    def check_workspace(self) -> bool:
        """Before anything runs: compare the held workspace with the claim's `workspace_check` and report it.

        True when there is nothing to check or the console admitted the run. False when it did not: the console
        has already failed the run (`workspace_validation_failed`), so nothing more is written for it. Raises
        `RunFailed` (`no_workspace`) when the held workspace could not be made."""
        if self._no_workspace is not None:
            raise RunFailed("no_workspace", self._no_workspace)
        check = self.claim.get("workspace_check")
        if not isinstance(check, Mapping):
            return True
        if self.holder is None:
            log.warning("run %s: the claim asks for a workspace check, but this worker holds no workspaces", self.id)
            return True
        org = org_of(self.claim["workspace_key"])
        body = validate(self.workspace, org, check.get("manifest") or [], label=self.holder.label)
        answer = self._write(
            lambda give_up: self.console.workspace_report(self.id, self.epoch, body, give_up=give_up),
            during="workspace",
        )
        if answer.get("admitted") is not False:
            log.info("run %s: workspace checked (%d entries, %d differ)", self.id, body["checked"], len(body["files"]))
            return True
        log.warning(
            "run %s: not admitted, the workspace differs from its checkpoints (action %s): %s",
            self.id,
            answer.get("action"),
            answer.get("detail", ""),
        )
        self._finishing = True  # the run is over: a heartbeat refused from now on is no lost lease
        self._ended = "refused"
        return False

    # --- plan order ---------------------------------------------------------------------------------------

    def _wait_plan_turn(self, seq: int, parent_seq: int | None) -> None:
        if parent_seq is not None:
            return
        with self._plan_turn:
            while self._planned_upto < seq - 1:
                self._plan_turn.wait(0.05)

    async def _await_plan_turn(self, seq: int) -> None:
        # Polling, not a blocking wait: a blocked worker thread per call could exhaust the default executor.
        while True:
            with self._lock:
                if self._planned_upto >= seq - 1:
                    return
            await asyncio.sleep(0.005)

    def _settle_plan(self, seq: int) -> None:
        with self._plan_turn:
            self._settle_plan_locked(seq)

    def _settle_plan_locked(self, seq: int) -> None:
        """Step `seq` is past its plan (planned, replayed, or given up): the next number may be planned."""
        self._settled.add(seq)
        while self._planned_upto + 1 in self._settled:
            self._planned_upto += 1
            self._settled.discard(self._planned_upto)
        self._plan_turn.notify_all()

    # --- lease, stop, writes -------------------------------------------------------------------------------

    def _boundary(self, seq: int) -> None:
        """Between steps: a lost lease, a stop request or a shutdown ends the agent's work here."""
        if self._ended == "diverged":
            raise RuntimeError(f"run {self.id} diverged and was refused; it takes no more steps")
        self._check_lease()
        if self.stop_requested.is_set():
            self._ended = "stopped"
            raise StopRequested(self.id, seq)
        if self.shutdown.is_set():
            log.info("run %s: worker shutting down before step %d; the lease will lapse", self.id, seq)
            self._ended = "shutdown"
            raise ShuttingDown(self.id, seq)

    def _check_lease(self) -> None:
        if not self._lost.is_set() and time.monotonic() >= self._deadline:
            log.warning("run %s: lease not renewed for %.0f s; treating it as lost", self.id, self._lease_seconds)
            self._mark_lost()
        if self._lost.is_set():
            self._ended = "lost"
            raise LeaseLost(self.id)

    def _mark_lost(self) -> None:
        self._lost.set()
        self.cancel.set()

    def _request_stop(self) -> None:
        self.stop_requested.set()
        self.cancel.set()

    @property
    def lease_live(self) -> bool:
        return not self._lost.is_set() and time.monotonic() < self._deadline

    def _write(self, send: Callable[[Callable[[], bool]], Any], *, during: str | None = None) -> Any:
        """A write for this run, retried (same key) while its lease is live; a lapse or 409 is `LeaseLost`."""
        try:
            # Retried while the lease is live (a web restart, a short database outage); a shutdown whose drain
            # time ran out stops retrying at once.
            return send(lambda: not self.lease_live or self.abandon.is_set())
        except Refused as exc:
            exc.during = during
            raise
        except LeaseLost as exc:
            log.warning("run %s: lease is stale (%s); abandoning the run", self.id, exc.detail)
            self._mark_lost()
            self._ended = "lost"
            raise LeaseLost(self.id, exc.detail) from None
        except ConsoleUnavailable as exc:
            if not self.lease_live:
                self._mark_lost()
                self._ended = "lost"
                raise LeaseLost(self.id, f"the console did not answer before the lease lapsed: {exc.detail}") from None
            raise

    def _hook(self, point: str, seq: int) -> None:
        if self._on_boundary is not None:
            self._on_boundary(point, seq, self)

    # --- heartbeat ----------------------------------------------------------------------------------------

    def start_heartbeat(self) -> None:
        if self._beat is None:
            self._beat = threading.Thread(target=self._heartbeat, name=f"heartbeat-run-{self.id}", daemon=True)
            self._beat.start()

    def stop_heartbeat(self, wait: float = 0.0) -> None:
        """Stop renewing the lease; with `wait`, give a renewal in flight that long to end."""
        self._halt.set()
        if wait and self._beat is not None and self._beat is not threading.current_thread():
            self._beat.join(wait)

    @property
    def heartbeat_seconds(self) -> float:
        return heartbeat_interval(self._heartbeat_seconds, self._lease_seconds)

    def _heartbeat(self) -> None:
        interval = self.heartbeat_seconds
        while not self._halt.wait(interval):
            try:
                reply = self.console.heartbeat(
                    self.id, self.epoch, give_up=lambda: self._halt.is_set() or not self.lease_live
                )
            except LeaseLost as exc:
                if not self._halt.is_set() and not self._finishing:
                    log.warning("run %s: lease is stale (%s); abandoning the run", self.id, exc.detail)
                    self._mark_lost()
                return
            except Exception as exc:  # the heartbeat thread never dies with a traceback (e.g. a closed client)
                if self._halt.is_set():
                    return
                log.warning("run %s: heartbeat failed: %s", self.id, exc)
                if not self.lease_live:
                    log.warning("run %s: no renewal for a lease period; treating it as lost", self.id)
                    self._mark_lost()
                    return
                continue
            if self._halt.is_set():
                return
            self._deadline = reply.sent + self._lease_seconds
            stop = isinstance(reply.body, Mapping) and reply.body.get("stop_requested")
            if stop and not self.stop_requested.is_set():
                log.info("run %s: stop requested (heartbeat)", self.id)
                self._request_stop()

    # --- the end ------------------------------------------------------------------------------------------

    def hang(self) -> None:
        """Stop renewing the lease (a fault injection's hang): the run will lapse while the process lives."""
        self.stop_heartbeat()

    def finish(
        self,
        status: str,
        *,
        output: Any = None,
        error_code: str | None = None,
        detail: str | None = None,
    ) -> dict:
        """Finish the run (`succeeded`, `failed` or `stopped`). `serve` does this for the agent function."""
        with self._lock:
            if self._ended == "finished":
                raise RuntimeError(f"run {self.id} is already finished")
            wire = payloads.encode(output) if output is not None else None
            # A heartbeat crossing the finish is refused once the run ended: that is no lost lease.
            self._finishing = True
            reply = self._write(
                lambda give_up: self.console.finish(
                    self.id, self.epoch, status, error_code=error_code, detail=detail, output=wire, give_up=give_up
                )
            )
            self._ended = "finished"
            log.info(
                "run %s: finished %s%s%s",
                self.id,
                status,
                f" ({error_code})" if error_code else "",
                f": {detail}" if detail else "",
            )
            return reply


def _tool_and_call(name: Any, call: Callable | None) -> tuple[str, Callable | None]:
    spec = getattr(name, "__recovery_tool__", None)
    if spec is not None:
        return spec.name, (call if call is not None else name)
    if not isinstance(name, str) or not name:
        raise ValueError("a tool call needs the tool's name (or a function decorated with @tool)")
    if name == MODEL:
        raise ValueError("`model` is reserved for model turns: use run.model(name, request, call)")
    return name, call


def _wire_args(args: Any) -> Any:
    wire = payloads.encode(args)
    if not payloads.is_object(wire):
        raise ValueError("a tool call's args must be an object (a dict)")
    return wire


def _fingerprint(tool: str, wire_args: Any) -> str:
    """What replay compares: the tool name and the digest of the arguments (a model turn: name and digest)."""
    if tool == MODEL and isinstance(wire_args, Mapping):
        return f"{MODEL}\x00{wire_args.get('model')}\x00{wire_args.get('digest')}"
    return f"{tool}\x00{payloads.digest(payloads.decode(wire_args))}"


def _lease_seconds(claim: Mapping[str, Any]) -> float:
    given = claim.get("lease_seconds")
    if isinstance(given, int | float) and not isinstance(given, bool) and given > 0:
        return float(given)
    # An older console names only the expiry: measure it against this machine's clock.
    expires = claim.get("lease_expires_at")
    if isinstance(expires, str):
        try:
            left = (datetime.fromisoformat(expires) - datetime.now().astimezone()).total_seconds()
        except ValueError:
            left = 0.0
        if left > 0:
            return max(1.0, left)
    return 180.0


def _error_text(exc: BaseException | None) -> str:
    if exc is None:
        return "failed"
    if isinstance(exc, StepFailed):
        return exc.error
    if isinstance(exc, ToolError):
        return str(exc) or type(exc).__name__
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _short(value: Any, limit: int = 200) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


Agent = Callable[[Run], Any] | Callable[[Run], Awaitable[Any]]
