"""Shared by test modules (from tests/live/test_consumers.py; no test module imports another)."""

import re
import time

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from config.asgi import application
from console.live.relay import relay

ORIGIN = (b"origin", b"http://testserver")


@pytest.fixture(autouse=True)
def live_settings(settings, monkeypatch):
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    # AllowedHostsOriginValidator copied ALLOWED_HOSTS when config.asgi was imported:
    # the override above does not reach it, so allow testserver on the real validator too.
    validator = application.application_mapping["websocket"]
    monkeypatch.setattr(validator, "allowed_origins", [*validator.allowed_origins, "testserver"])
    settings.CONSOLE_RELAY_POLL_SECONDS = 0.05
    settings.CONSOLE_LIVE_RECHECK_SECONDS = 0.2
    reset_relay()
    yield
    reset_relay()


async def connect(path: str, user=None, *, headers=None) -> WebsocketCommunicator:
    if headers is None:
        headers = await sync_to_async(session_headers)(user) if user is not None else [ORIGIN]
    communicator = WebsocketCommunicator(application, path, headers=headers)
    connected, _ = await communicator.connect(timeout=5)
    assert connected, f"{path} was refused"
    return communicator


async def subscribed(path: str, user) -> WebsocketCommunicator:
    """A socket whose subscription is in place: the page's first resync has been answered.

    A consumer handles messages one at a time, so the answer to a resync proves
    that connect() (access check, subscribe) has finished.
    """
    communicator = await connect(path, user)
    await communicator.send_json_to({"type": "resync", "last_event": 0, "reconnect": False})
    snapshot = await receive_page(communicator)
    assert 'id="live-cursor"' in snapshot
    return communicator


def is_warnings(message: str) -> bool:
    """The header's operations warnings: sent to every live page once after it connects, then on a change."""
    return message.strip().startswith('<div hx-swap-oob="true" id="ops-alerts"')


async def receive_page(communicator, timeout: float = 5) -> str:
    """The next message that is about the page itself (the header's warnings come and go on their own)."""
    while is_warnings(message := await communicator.receive_from(timeout=timeout)):
        pass
    return message


async def receive_until(communicator, predicate, *, timeout: float = 5.0) -> list[str]:
    """Every message about the page up to and including the first one that satisfies predicate (the header's
    warnings, which reach a page on their own schedule, are left out unless they are what predicate looks for)."""
    received, deadline = [], time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no matching message within {timeout}s; received {received!r}")
        try:
            message = await communicator.receive_from(timeout=left)
        except TimeoutError:
            continue
        if predicate(message):
            return [*received, message]
        if not is_warnings(message):
            received.append(message)


async def close_code(communicator, *, timeout: float = 5.0) -> tuple[int, list[str]]:
    """Wait for the server to close the socket; return the code and whatever was sent before."""
    sent, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            output = await communicator.receive_output(timeout=deadline - time.monotonic())
        except TimeoutError:
            break
        if output["type"] == "websocket.close":
            return output.get("code", 1000), sent
        sent.append(output.get("text", ""))
    raise AssertionError(f"the socket was not closed within {timeout}s; sent {sent!r}")


def cursor_of(html: str) -> int:
    """The cursor a pushed batch carries; -1 for a message with none (the header's warnings)."""
    found = re.search(r'id="live-cursor" data-last-event="(\d+)"', html)
    return int(found.group(1)) if found else -1


def normalize(html: str) -> str:
    """Compare cards as drawn: ignore whitespace, the out-of-band marker and the per-request CSRF input."""
    html = CSRF_INPUT.sub("", html).replace(' hx-swap-oob="true"', "")
    html = re.sub(r"(<time\b[^>]*>)[^<]*(</time>)", r"\1\2", html)
    html = re.sub(r">\s+<", "><", html)
    return re.sub(r"\s+", " ", html).strip()


def page_html(user, url: str) -> str:
    client = Client()
    client.force_login(user)
    response = client.get(url)
    assert response.status_code == 200, response.status_code
    return response.content.decode()


CSRF_INPUT = re.compile(r'<input type="hidden" name="csrfmiddlewaretoken" value="[^"]*">')


def reset_relay() -> None:
    """The relay is one per process and bound to the loop of its first subscriber; every test has its own loop."""
    relay.subscribers.clear()
    relay.gaps.clear()
    relay.task = relay.listener = relay.rechecker = relay.loop = relay.last_id = None


def session_headers(user) -> list[tuple[bytes, bytes]]:
    client = Client()
    client.force_login(user)
    return [ORIGIN, (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())]
