"""A worker that is shutting down does not retry a claim against a console that went away."""

import threading
import time

import httpx
import pytest

from recovery_console import Console, ConsoleUnavailable


def refusing(calls: list) -> httpx.MockTransport:
    def handler(request):
        calls.append(request.url.path)
        raise httpx.ConnectError("Connection refused", request=request)

    return httpx.MockTransport(handler)


def test_a_claim_is_not_retried_once_the_worker_is_stopping_but_other_writes_are():
    calls, stopping = [], threading.Event()
    stopping.set()
    with Console("http://console", "t", transport=refusing(calls), backoff=0.01, retry_seconds=0.3) as console:
        started = time.monotonic()
        with pytest.raises(ConsoleUnavailable):
            console.claim("w-1", give_up=stopping.is_set)
        assert calls == ["/api/runner/claim/"] and time.monotonic() - started < 0.5
        calls.clear()
        with pytest.raises(ConsoleUnavailable):
            console.heartbeat(1, 1)  # an outcome or a renewal is still worth a few tries
        assert len(calls) > 1
