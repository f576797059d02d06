"""`Console`: the runner API over HTTP (shared/API.md "Runner API" and "Agent runs").

Every write carries one `Idempotency-Key` per logical call, and its retries carry the same key: a write the
console applied whose answer was lost is answered again from the console's record, never applied twice.
Retries happen on transport errors and 502/503/504 with backoff, for as long as the caller's `give_up` allows
(a run's writes: while its lease is live; a claim: until the worker shuts down). A 4xx is never retried.
"""

from __future__ import annotations

import inspect
import json
import logging
import random
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from recovery_console import payloads
from recovery_console.errors import ConsoleUnavailable, LeaseLost, Refused

log = logging.getLogger("recovery_console")

RETRY_STATUSES = frozenset({502, 503, 504})  # a proxy in front of a restarting console; its database out of reach
MAX_RETRY_AFTER = 30.0  # a Retry-After is honoured up to this (a proxy's "come back in an hour" is not)
MAX_RESULT_BYTES = 8 * 1024 * 1024  # the console refuses a larger step result with 413
MODES = ("replay", "notify", "forget")


@dataclass(frozen=True)
class Tool:
    """One entry of an agent's tool catalogue: its name, its default recovery mode, what it does.

    `replay`: safe to run again when cut off; `notify`: its outcome is unknown when cut off and someone (a
    person, or the agent itself) verifies before any repeat; `forget`: a cut-off call is dropped.
    """

    name: str
    mode: str
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError("a tool needs a name")
        if self.name == "model":
            raise ValueError("`model` is reserved for model turns (run.model); it is not a tool of the catalogue")
        if self.mode not in MODES:
            raise ValueError(f"tool {self.name!r}: mode must be one of {', '.join(MODES)}, not {self.mode!r}")

    def as_json(self) -> dict:
        return {"name": self.name, "mode": self.mode, "description": self.description}


def tool(name: str | None = None, *, mode: str, description: str = "") -> Callable[[Callable], Callable]:
    """Declare a function as a tool of the catalogue, with its recovery mode:

    @tool(mode="notify", description="Write a file in the workspace")
    def file_write(path: str, content: str) -> dict: ...

    serve(console, "coder", agent, tools=[file_write])   # registered with its mode
    run.tool(file_write, {"path": "a.txt", "content": "hi"})   # called as file_write(**args)
    """

    def declare(fn: Callable) -> Callable:
        summary = description or (inspect.getdoc(fn) or "").split("\n", 1)[0]
        fn.__recovery_tool__ = Tool(name or fn.__name__, mode, summary)
        return fn

    return declare


def as_tool(entry: Any) -> Tool:
    """A catalogue entry from a `Tool` or a function decorated with `@tool`."""
    if isinstance(entry, Tool):
        return entry
    spec = getattr(entry, "__recovery_tool__", None)
    if isinstance(spec, Tool):
        return spec
    raise TypeError(f"not a tool: {entry!r} (use Tool(name, mode) or a function decorated with @tool)")


@dataclass(frozen=True)
class Reply:
    body: Any
    sent: float  # time.monotonic() when the attempt that got this answer was sent


def json_size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass"))


class Console:
    """A connection to one console: `Console("https://console.example.com", "<worker token>")`.

    The token is a worker token (`manage.py issue_token --worker <name> --org <slug>`). One Console may be
    shared by every run and thread of a process.
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = 30.0,
        retry_seconds: float = 60.0,
        backoff: float = 0.2,
        max_backoff: float = 5.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not token:
            raise ValueError("a worker token is required (manage.py issue_token --worker <name> --org <slug>)")
        self.url = url.rstrip("/")
        self.timeout = float(timeout)
        self.retry_seconds = float(retry_seconds)
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self._http = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Token {token}", "Accept": "application/json"},
            timeout=self.timeout,
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Console:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Console({self.url!r})"

    # --- the runner API ---------------------------------------------------------------------------------

    def register_tools(self, agent: str, tools: Iterable[Tool]) -> dict:
        """Replace `agent`'s tool catalogue; returns `{"agent", "tools": [{"name", "default_mode", "mode", …}]}`."""
        body = {"tools": [as_tool(t).as_json() for t in tools]}
        return self.post(f"/api/runner/agents/{quote(agent, safe='')}/tools/", body).body or {}

    def claim(
        self,
        worker: str,
        *,
        agents: Iterable[str] | None = None,
        kinds: Iterable[str] | None = None,
        workspaces: Mapping[str, str] | None = None,
        give_up: Callable[[], bool] | None = None,
    ) -> dict | None:
        """Lease the next run this worker may take (of `agents`, of `kinds`), or None when there is none.

        `workspaces` (`{"label", "root"}`) says this worker holds its tasks' workspaces (`workspace.Holder`)."""
        body: dict[str, Any] = {"worker": worker}
        if agents is not None:
            body["agents"] = list(agents)
        if kinds is not None:
            body["kinds"] = list(kinds)
        if workspaces is not None:
            body["workspaces"] = dict(workspaces)
        reply = self.post("/api/runner/claim/", body, give_up=give_up)
        if reply.body is None:
            return None
        claim = dict(reply.body)
        claim["_sent"] = reply.sent
        return claim

    def heartbeat(self, run: int, epoch: int, *, give_up: Callable[[], bool] | None = None) -> Reply:
        return self.post(f"/api/runner/runs/{run}/heartbeat/", {"epoch": epoch}, give_up=give_up)

    def plan(
        self,
        run: int,
        epoch: int,
        seq: int,
        tool: str,
        args: Any,
        parent_seq: int | None = None,
        *,
        dispatch: bool = False,
        give_up: Callable[[], bool] | None = None,
    ) -> dict:
        """Plan step `seq`; with `dispatch`, dispatch it too, in the same transaction (one round trip; the
        answer's `phase` is `dispatched`, unless the console predates it: then it is `planned`)."""
        body: dict[str, Any] = {"epoch": epoch, "seq": seq, "tool": tool, "args": args}
        if parent_seq is not None:
            body["parent_seq"] = parent_seq
        if dispatch:
            body["dispatch"] = True
        return self.post(f"/api/runner/runs/{run}/steps/", body, give_up=give_up).body or {}

    def plan_batch(self, run: int, epoch: int, steps: list[dict], *, give_up: Callable[[], bool] | None = None) -> dict:
        """Plan 1..64 steps (`{"seq", "tool", "args", "parent_seq"?}`) in one transaction, all or nothing."""
        body = {"epoch": epoch, "steps": steps}
        return self.post(f"/api/runner/runs/{run}/steps/", body, give_up=give_up).body or {}

    def dispatch(self, run: int, epoch: int, seq: int, *, give_up: Callable[[], bool] | None = None) -> dict:
        return self.post(f"/api/runner/runs/{run}/steps/{seq}/dispatch/", {"epoch": epoch}, give_up=give_up).body or {}

    def complete(
        self,
        run: int,
        epoch: int,
        seq: int,
        *,
        ok: bool,
        result: Any = None,
        error: str | None = None,
        usage: int | Mapping[str, Any] | None = None,
        files: list[str] | None = None,
        result_too_large: bool = False,
        workspace: Mapping[str, Any] | None = None,
        give_up: Callable[[], bool] | None = None,
    ) -> dict:
        """Complete step `seq`; `workspace` is what the step changed in a workspace this worker holds."""
        body: dict[str, Any] = {"epoch": epoch, "ok": ok}
        if result is not None:
            body["result"] = result
        if error is not None:
            body["error"] = payloads.readable(error)
        if usage is not None:
            body["usage"] = usage
        if files:
            body["files"] = files
        if result_too_large:
            body["result_too_large"] = True
        if workspace is not None:
            body["workspace"] = dict(workspace)
        return self.post(f"/api/runner/runs/{run}/steps/{seq}/complete/", body, give_up=give_up).body or {}

    def finish(
        self,
        run: int,
        epoch: int,
        status: str,
        *,
        error_code: str | None = None,
        detail: str | None = None,
        output: Any = None,
        diverged: Mapping[str, Any] | None = None,
        give_up: Callable[[], bool] | None = None,
    ) -> dict:
        body: dict[str, Any] = {"epoch": epoch, "status": status}
        if error_code:
            body["error_code"] = error_code
        if detail:
            body["detail"] = payloads.readable(detail)
        if output is not None:
            body["output"] = output
        if diverged is not None:
            body["diverged"] = dict(diverged)
        return self.post(f"/api/runner/runs/{run}/finish/", body, give_up=give_up).body or {}

    def ack(self, run: int, epoch: int, ids: list[int], *, give_up: Callable[[], bool] | None = None) -> dict:
        """Acknowledge that the agent read these follow-ups; only from then on does the console say `read`."""
        body = {"epoch": epoch, "ids": list(ids)}
        return self.post(f"/api/runner/runs/{run}/messages/ack/", body, give_up=give_up).body or {}

    def create_task(
        self,
        run: int,
        epoch: int,
        title: str,
        input: Any,
        agent: str = "",
        *,
        give_up: Callable[[], bool] | None = None,
    ) -> dict:
        """A child task of the run's task (the reference worker's `task_create`)."""
        body = {"epoch": epoch, "title": title, "input": input, "agent": agent}
        return self.post(f"/api/runner/runs/{run}/tasks/", body, give_up=give_up).body or {}

    def workspace_report(
        self, run: int, epoch: int, body: Mapping[str, Any], *, give_up: Callable[[], bool] | None = None
    ) -> dict:
        """Report how a held workspace compares with the claim's `workspace_check`, before the run does anything;
        the answer is `{"admitted": true}` or `{"admitted": false, "action", "detail"}` (the run was failed)."""
        payload = {"epoch": epoch, **body}
        return self.post(f"/api/runner/runs/{run}/workspace/", payload, give_up=give_up).body or {}

    def repair_claim(self, worker: str, label: str, *, give_up: Callable[[], bool] | None = None) -> dict | None:
        """The next repair job for the workspaces labelled `label` (`reconcile` or `reissue`), or None."""
        reply = self.post("/api/runner/repairs/claim/", {"worker": worker, "label": label}, give_up=give_up)
        return dict(reply.body) if reply.body is not None else None

    def repair_result(
        self,
        repair: int,
        worker: str,
        *,
        ok: bool,
        result: Mapping[str, Any],
        error: Mapping[str, Any] | None = None,
        give_up: Callable[[], bool] | None = None,
    ) -> dict:
        """What a repair job did on this worker's disk (`error`: why it did not, `{"code", "detail", "files"?}`)."""
        body: dict[str, Any] = {"worker": worker, "ok": ok, "result": dict(result)}
        if error is not None:
            body["error"] = {**error, "detail": payloads.readable(str(error.get("detail", "")))}
        return self.post(f"/api/runner/repairs/{repair}/result/", body, give_up=give_up).body or {}

    def export_claim(self, worker: str, label: str, *, give_up: Callable[[], bool] | None = None) -> dict | None:
        """The next export of a workspace labelled `label` (a run that succeeded, its destination), or None."""
        reply = self.post("/api/runner/exports/claim/", {"worker": worker, "label": label}, give_up=give_up)
        return dict(reply.body) if reply.body is not None else None

    def export_result(
        self, export: int, *, ok: bool, result: Mapping[str, Any], error: str = "",
        give_up: Callable[[], bool] | None = None,
    ) -> dict:  # fmt: skip
        """What an export did on this worker's disk, file by file (`error`: why it stopped, in words)."""
        body = {"ok": ok, "result": dict(result), "error": payloads.readable(error)[:5000]}
        return self.post(f"/api/runner/exports/{export}/result/", body, give_up=give_up).body or {}

    # --- transport --------------------------------------------------------------------------------------

    def post(self, path: str, body: Any, *, give_up: Callable[[], bool] | None = None) -> Reply:
        """POST `body` with one Idempotency-Key, retried with that key until it is answered or `give_up()`.

        Without `give_up`, retries stop after `retry_seconds`. Raises `LeaseLost` (409 `stale_lease`),
        `Refused` (any other refusal) or `ConsoleUnavailable`.
        """
        key = uuid.uuid4().hex
        started = time.monotonic()
        if give_up is None:
            deadline = started + self.retry_seconds

            def give_up() -> bool:
                return time.monotonic() >= deadline

        attempt = 0
        while True:
            attempt += 1
            sent = time.monotonic()
            retry_after = None
            try:
                response = self._http.post(path, json=body, headers={"Idempotency-Key": key})
            except httpx.TransportError as exc:
                problem = f"the console is unreachable ({type(exc).__name__}: {exc})"
            else:
                if response.status_code not in RETRY_STATUSES:
                    return Reply(self._decode(response), sent)
                code = self._code(response)
                problem = f"the console answered {response.status_code}" + (f" {code}" if code else "")
                retry_after = response.headers.get("Retry-After")
            if give_up():
                raise ConsoleUnavailable(f"POST {path}: {problem} (after {attempt} attempt(s))")
            pause = min(self.max_backoff, self.backoff * 2 ** (attempt - 1)) * (0.5 + random.random() / 2)
            if retry_after and retry_after.strip().isdigit():
                # The console says when it expects to answer again (a database outage is 503 with Retry-After).
                pause = max(pause, min(float(retry_after), MAX_RETRY_AFTER))
            log.warning("POST %s: %s; retrying with the same Idempotency-Key in %.2f s", path, problem, pause)
            end = time.monotonic() + pause
            while time.monotonic() < end:
                if give_up():
                    raise ConsoleUnavailable(f"POST {path}: {problem} (after {attempt} attempt(s))")
                time.sleep(min(0.05, max(0.0, end - time.monotonic())))

    @staticmethod
    def _code(response: httpx.Response) -> str:
        try:
            body = response.json()
        except ValueError:
            return ""
        return str(body.get("code") or "") if isinstance(body, dict) else ""

    @staticmethod
    def _decode(response: httpx.Response) -> Any:
        if response.status_code == 204:
            return None
        try:
            body = response.json() if response.content else {}
        except ValueError:
            body = {"code": "error", "detail": response.text[:500]}
        if response.is_success:
            return body
        code = body.get("code") if isinstance(body, dict) else None
        detail = str(body.get("detail", "")) if isinstance(body, dict) else str(body)[:500]
        if response.status_code == 409 and code == "stale_lease":
            raise LeaseLost(detail=detail)
        raise Refused(code, detail, status=response.status_code, body=body)
