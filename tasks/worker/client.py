"""A thin HTTP client for the runner API (see shared/API.md, "Runner API").

Errors become exceptions the worker loop can act on: `StaleLease` (stop
touching the run), `NotEligible` (the body says why, e.g. `reason:
stop_requested`), `PayloadTooLarge`, `RunnerUnavailable` (the server could not
be reached, after retries) and the generic `RunnerError`.

Transport failures are retried a few times with a short backoff because the
server may be restarting. Each logical call sends one `Idempotency-Key`, reused
by its retries, so a retried write the server already applied is not applied
twice. A 4xx is never retried.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from typing import Any

import httpx

from tasks import payloads

log = logging.getLogger("tasks.worker")

MAX_RESULT_BYTES = 8 * 1024 * 1024  # the server refuses a larger step result with 413
RETRY_STATUSES = frozenset({502, 503, 504})  # a proxy in front of a restarting server


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
                if attempt > self.retries or (give_up is not None and give_up.is_set()):
                    raise RunnerUnavailable(
                        0, {"code": "unavailable", "detail": f"{type(exc).__name__}: {exc}"}
                    ) from exc
                log.warning(
                    "runner API %s unreachable (%s); retry %d/%d", path, type(exc).__name__, attempt, self.retries
                )
                self._pause(attempt)
                continue
            if response.status_code in RETRY_STATUSES and attempt <= self.retries:
                log.warning("runner API %s answered %d; retry %d/%d", path, response.status_code, attempt, self.retries)
                self._pause(attempt)
                continue
            return self._decode(response)

    def _pause(self, attempt: int) -> None:
        time.sleep(min(self.backoff * 2 ** (attempt - 1), 5.0))

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
