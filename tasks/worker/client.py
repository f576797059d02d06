"""A thin HTTP client for the runner API (see shared/API.md, "Runner API").

Errors become exceptions the worker loop can act on: `StaleLease` (stop
touching the run), `NotEligible` (the body says why, e.g. `reason:
stop_requested`), `PayloadTooLarge`, `RunnerUnavailable` (the server could not
be reached, after retries) and the generic `RunnerError`.

Transport failures and 502/503/504 answers (a restarting server, a proxy in front
of it, a database outage the server reports as 503 with Retry-After) are retried
with a capped backoff: a few times for a call of its own (a claim, a heartbeat),
and for as long as a window allows for the writes of a held run — the client
`within(window)` returns retries while its lease is live, so a web restart or a
short database outage does not abandon the run. Each logical call sends one
`Idempotency-Key`, reused by its retries, so a retried write the server already
applied is not applied twice. A 4xx is never retried.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx

from tasks import payloads

log = logging.getLogger("tasks.worker")

MAX_RESULT_BYTES = 8 * 1024 * 1024  # the server refuses a larger step result with 413
RETRY_STATUSES = frozenset({502, 503, 504})  # a proxy in front of a restarting server; the database out of reach
MAX_PAUSE = 5.0  # the longest wait between two tries (unless the server's Retry-After asks for more)
MAX_RETRY_AFTER = 30.0  # a Retry-After is honoured up to this (a proxy's "come back in an hour" is not)


class RunnerError(Exception):
    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.body = body if body is not None else {}
        super().__init__(f"runner API {status}: {self.code or ''} {self.detail}".strip())

    @property
    def code(self) -> str | None:
        return self.body.get("code") if isinstance(self.body, dict) else None

    @property
    def detail(self) -> str:
        if isinstance(self.body, dict):
            return str(self.body.get("detail", ""))
        return str(self.body)[:500]


class StaleLease(RunnerError):
    """409 stale_lease: this worker no longer holds the run; it must write nothing more."""


class NotEligible(RunnerError):
    """409 not_eligible; `reason` (e.g. `stop_requested`) says why when the server tells."""

    @property
    def reason(self) -> str | None:
        return self.body.get("reason") if isinstance(self.body, dict) else None


class PayloadTooLarge(RunnerError):
    """413 payload_too_large (or refused locally before sending)."""


class RunnerUnavailable(RunnerError):
    """The server could not be reached, even after retries (status 0)."""


def _error_for(status: int, body: Any) -> RunnerError:
    code = body.get("code") if isinstance(body, dict) else None
    if status == 409 and code == "stale_lease":
        return StaleLease(status, body)
    if status == 409 and code == "not_eligible":
        return NotEligible(status, body)
    if status == 413:
        return PayloadTooLarge(status, body)
    return RunnerError(status, body)


def _json_size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), default=str).encode())


class RunnerClient:
    def __init__(
        self,
        base_url: str,
        token: str,
        timeout: float = 30.0,
        *,
        retries: int = 4,
        backoff: float = 0.5,
        transport: httpx.BaseTransport | None = None,
        stopping: threading.Event | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.retries = retries
        self.backoff = backoff
        # Seconds left to keep retrying a write (see `within`); None: `retries` tries.
        self.window: Callable[[], float] | None = None
        # Set when the worker shuts down: a claim is then not retried (nothing new is taken on).
        self.stopping = stopping
        # httpx.Client is safe to share between the executor and heartbeat threads.
        self._http = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Token {token}", "Accept": "application/json"},
            timeout=timeout,
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RunnerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def within(self, window: Callable[[], float]) -> RunnerClient:
        """This client (the same connections), retrying each call for as long as `window()` seconds remain —
        for a held run, until its lease would lapse: past that a write is refused anyway."""
        leased = copy.copy(self)
        leased.window = window
        return leased

    # --- the runner API --------------------------------------------------

    def claim(self, worker_label: str) -> dict | None:
        """Lease the next admissible run, or None (204) when there is none."""
        return self._post("/api/runner/claim/", {"worker": worker_label}, give_up=self.stopping)

    def heartbeat(self, run: int, epoch: int) -> dict:
        return self._post(f"/api/runner/runs/{run}/heartbeat/", {"epoch": epoch}) or {}

    def plan(self, run: int, epoch: int, seq: int, tool: str, args: dict, parent_seq: int | None = None) -> dict:
        body: dict[str, Any] = {"epoch": epoch, "seq": seq, "tool": tool, "args": args}
        if parent_seq is not None:
            body["parent_seq"] = parent_seq
        return self._post(f"/api/runner/runs/{run}/steps/", body) or {}

    def create_task(self, run: int, epoch: int, title: str, input: dict, agent: str = "") -> dict:
        body = {"epoch": epoch, "title": title, "input": input, "agent": agent}
        return self._post(f"/api/runner/runs/{run}/tasks/", body) or {}

    def ack(self, run: int, epoch: int, ids: list[int]) -> dict:
        """Acknowledge the follow-ups the claim handed over: from now on they are read by this run."""
        return self._post(f"/api/runner/runs/{run}/messages/ack/", {"epoch": epoch, "ids": ids}) or {}

    def dispatch(self, run: int, epoch: int, seq: int) -> dict:
        return self._post(f"/api/runner/runs/{run}/steps/{seq}/dispatch/", {"epoch": epoch}) or {}

    def complete(
        self,
        run: int,
        epoch: int,
        seq: int,
        ok: bool,
        result: Any = None,
        error: str | None = None,
        usage: int | None = None,
        result_too_large: bool = False,
        files: list[str] | None = None,
    ) -> dict:
        body: dict[str, Any] = {"epoch": epoch, "ok": ok}
        if files:
            body["files"] = files
        if result is not None:
            # Refuse locally what the server would refuse: no point uploading it first.
            if _json_size(result) > MAX_RESULT_BYTES:
                raise PayloadTooLarge(413, {"code": "payload_too_large", "detail": "step result exceeds 8 MiB"})
            body["result"] = result
        if error is not None:
            body["error"] = payloads.readable(error)
        if usage is not None:
            body["usage"] = usage
        if result_too_large:
            body["result_too_large"] = True
        return self._post(f"/api/runner/runs/{run}/steps/{seq}/complete/", body) or {}

    def finish(
        self, run: int, epoch: int, status: str, error_code: str | None = None, detail: str | None = None
    ) -> dict:
        body: dict[str, Any] = {"epoch": epoch, "status": status}
        if error_code:
            body["error_code"] = error_code
        if detail:
            body["detail"] = payloads.readable(detail)
        return self._post(f"/api/runner/runs/{run}/finish/", body) or {}

    # --- transport -------------------------------------------------------

    def _post(self, path: str, body: dict, give_up: threading.Event | None = None) -> dict | None:
        headers = {"Idempotency-Key": str(uuid.uuid4())}
        attempt = 0
        while True:
            attempt += 1
            try:
                response = self._http.post(path, json=body, headers=headers)
            except httpx.TransportError as exc:
                pause = self._retry_in(attempt, None, give_up)
                if pause is None:
                    raise RunnerUnavailable(
                        0, {"code": "unavailable", "detail": f"{type(exc).__name__}: {exc}"}
                    ) from exc
                log.warning("runner API %s unreachable (%s); %s", path, type(exc).__name__, self._when(attempt, pause))
                time.sleep(pause)
                continue
            if response.status_code in RETRY_STATUSES:
                pause = self._retry_in(attempt, response.headers.get("Retry-After"), give_up)
                if pause is not None:
                    code = self._decode_quietly(response)
                    log.warning(
                        "runner API %s answered %d%s; %s",
                        path,
                        response.status_code,
                        f" {code}" if code else "",
                        self._when(attempt, pause),
                    )
                    time.sleep(pause)
                    continue
            return self._decode(response)

    def _retry_in(self, attempt: int, retry_after: str | None, give_up: threading.Event | None) -> float | None:
        """Seconds to wait before the next try, or None to give up."""
        if give_up is not None and give_up.is_set():
            return None
        pause = min(self.backoff * 2 ** (attempt - 1), MAX_PAUSE)
        if retry_after and retry_after.strip().isdigit():
            pause = max(pause, min(float(retry_after), MAX_RETRY_AFTER))
        if self.window is None:
            return pause if attempt <= self.retries else None
        left = self.window()
        if left <= 0:
            return None
        return min(pause, left)

    def _when(self, attempt: int, pause: float) -> str:
        if self.window is None:
            return f"retry {attempt}/{self.retries} in {pause:.1f} s"
        return f"retry {attempt} in {pause:.1f} s (the lease allows {max(0.0, self.window()):.0f} s more)"

    @staticmethod
    def _decode_quietly(response: httpx.Response) -> str:
        try:
            body = response.json()
        except ValueError:
            return ""
        return str(body.get("code") or "") if isinstance(body, dict) else ""

    @staticmethod
    def _decode(response: httpx.Response) -> dict | None:
        if response.status_code == 204:
            return None
        try:
            body = response.json() if response.content else {}
        except ValueError:
            body = {"code": "error", "detail": response.text[:500]}
        if response.is_success:
            return body
        raise _error_for(response.status_code, body)
