"""Sessions end everywhere: sign-in is throttled (django-axes) with a clear lockout and an admin unlock; signing out,
changing the password and session expiry close that session's live sockets at once (4401), and only that one's."""

import asyncio
import time

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.core.management import call_command
from django.test import Client

from config.asgi import application
from console.live.consumers import CLOSE_UNAUTHENTICATED
from tasks.models import Event
from tasks.services import task_create
from tests.console.scenarios import SAFE_PLAN
from tests.factories import make_member
from tests.helpers import visible_text
from tests.live.sockets import (
    ORIGIN,
    live_settings,  # noqa: F401 (an autouse fixture)
    receive_page,
)

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "pw-12345678"  # tests.factories.make_member


def signed_in(user) -> Client:
    client = Client()
    assert client.post("/accounts/login/", {"username": user.username, "password": PASSWORD}).status_code == 302
    return client


async def socket_of(client: Client, path: str) -> WebsocketCommunicator:
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    communicator = WebsocketCommunicator(application, path, headers=[ORIGIN, (b"cookie", cookie)])
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    await communicator.send_json_to({"type": "resync", "last_event": 0})
    await receive_page(communicator)  # subscribed: the first resync was answered
    return communicator


async def closed_with(communicator, code: int, within: float) -> float:
    """Seconds until the server closed the socket with `code` (fails if it did not within `within` s)."""
    started = time.monotonic()
    deadline = started + within
    while True:
        output = await communicator.receive_output(timeout=max(0.01, deadline - time.monotonic()))
        if output["type"] == "websocket.close":
            assert output.get("code") == code, output
            return time.monotonic() - started


async def still_open(communicator) -> bool:
    await communicator.send_json_to({"type": "resync", "last_event": 0})
    output = await communicator.receive_output(timeout=5)
    return output["type"] == "websocket.send"


@pytest.fixture
def task(org, agent):
    return task_create(org=org, actor="t", title="t", agent="builder", input=SAFE_PLAN)


# --- throttling ----------------------------------------------------------------------------


def test_wrong_passwords_lock_the_sign_in_with_a_clear_message_and_an_admin_unlocks_it(db, operator, settings):
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        r = client.post("/accounts/login/", {"username": "olive", "password": "wrong"})
        assert r.status_code == 200 and "didn't match" in visible_text(r.content.decode())
    assert client.post("/accounts/login/", {"username": "olive", "password": "wrong"}).status_code == 429
    # Now even the right password is refused, on the console's own sign-in page, saying why and what lifts it.
    r = client.post("/accounts/login/", {"username": "olive", "password": PASSWORD})
    assert r.status_code == 429
    text = visible_text(r.content.decode())
    assert "Signing in is locked" in text and "an admin of your organization to unlock it" in text
    assert 'name="password"' in r.content.decode()  # the styled sign-in form, not a bare error
    assert "sessionid" not in r.cookies
    # Another account from the same address is not locked by olive's failures.
    call_command("add_member", "acme", "vic", "--role", "viewer", "--password", PASSWORD)
    assert Client().post("/accounts/login/", {"username": "vic", "password": PASSWORD}).status_code == 302

    call_command("axes_reset_username", "olive")
    assert client.post("/accounts/login/", {"username": "olive", "password": PASSWORD}).status_code == 302


def test_an_admin_of_the_organization_sees_who_is_locked_and_unlocks_them_in_the_console(
    db, org, operator, admin_user, viewer, other_org, settings
):
    locked = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT):
        locked.post("/accounts/login/", {"username": "olive", "password": "wrong"})
    assert locked.post("/accounts/login/", {"username": "olive", "password": PASSWORD}).status_code == 429

    ada = Client()
    ada.force_login(admin_user)
    page = visible_text(ada.get("/settings/sign-in/").content.decode())
    assert "olive" in page and "Unlock olive" in page and str(settings.AXES_FAILURE_LIMIT) in page
    # Only admins of olive's organization: others get the styled refusal, another organization's admin a 404.
    for user in (operator, viewer):
        refused = Client()
        refused.force_login(user)
        r = refused.get("/settings/sign-in/")
        assert r.status_code == 403 and "Sign-in locks need the admin role" in r.content.decode()
        assert refused.post("/settings/sign-in/unlock/", {"username": "olive"}).status_code == 403
    stranger = Client()
    stranger.force_login(make_member(other_org, "gina", "admin"))
    assert "olive" not in stranger.get("/settings/sign-in/").content.decode()
    assert stranger.post("/settings/sign-in/unlock/", {"username": "olive"}).status_code == 404
    assert locked.post("/accounts/login/", {"username": "olive", "password": PASSWORD}).status_code == 429

    r = ada.post("/settings/sign-in/unlock/", {"username": "olive"}, follow=True)
    text = visible_text(r.content.decode())
    assert "Unlocked olive: they can sign in again now." in text and "Unlock olive" not in text
    event = Event.objects.get(kind="signin_unlocked")
    assert event.actor == "ada" and event.payload["username"] == "olive" and event.org_id == org.pk
    assert locked.post("/accounts/login/", {"username": "olive", "password": PASSWORD}).status_code == 302
    # Unlocking someone who is not locked says so, and claims nothing was lifted.
    again = visible_text(ada.post("/settings/sign-in/unlock/", {"username": "olive"}, follow=True).content.decode())
    assert "olive was not locked" in again and "Unlocked olive" not in again


# --- sockets close with their session ------------------------------------------------------


async def test_signing_out_closes_that_sessions_sockets_at_once_and_only_those(operator, task):
    here = await sync_to_async(signed_in)(operator)
    elsewhere = await sync_to_async(signed_in)(operator)
    mine = await socket_of(here, f"/ws/tasks/{task.pk}/")
    board = await socket_of(here, "/ws/board/")
    workers = await socket_of(here, "/ws/workers/")
    other = await socket_of(elsewhere, f"/ws/tasks/{task.pk}/")
    try:
        r = await sync_to_async(here.post)("/accounts/logout/")
        assert r.status_code == 302
        for communicator in (mine, board, workers):
            # "At once": the relay's next tail (50 ms here), far below the 3 s safety-net recheck.
            assert await closed_with(communicator, CLOSE_UNAUTHENTICATED, within=2.0) < 2.0
        assert await still_open(other)
    finally:
        for communicator in (mine, board, workers, other):
            await communicator.disconnect()


async def test_changing_the_password_closes_the_sockets_of_every_session(operator, task, settings):
    """Other sessions end. The one that changed it stays signed in under a new session key (Django cycles it), so
    sockets opened under the old key close too: a page there says to reload, and the reload signs in."""
    settings.CONSOLE_LIVE_RECHECK_SECONDS = 60  # the event, not the safety net, must do it
    here = await sync_to_async(signed_in)(operator)
    elsewhere = await sync_to_async(signed_in)(operator)
    other = await socket_of(elsewhere, f"/ws/tasks/{task.pk}/")
    mine = await socket_of(here, f"/ws/tasks/{task.pk}/")
    assert await still_open(mine)
    try:
        body = {"old_password": PASSWORD, "new_password1": "new-pass-987654", "new_password2": "new-pass-987654"}
        r = await sync_to_async(here.post)("/accounts/password_change/", body)
        assert r.status_code == 302 and r["Location"] == "/accounts/password_change/done/"
        assert await closed_with(other, CLOSE_UNAUTHENTICATED, within=2.0) < 2.0
        assert await closed_with(mine, CLOSE_UNAUTHENTICATED, within=2.0) < 2.0
        assert (await sync_to_async(elsewhere.get)("/")).status_code == 302  # signed out for pages too
        assert (await sync_to_async(here.get)("/")).status_code == 200  # this session goes on
        again = await socket_of(here, f"/ws/tasks/{task.pk}/")  # and its reloaded page is live again
        await again.disconnect()
    finally:
        await other.disconnect()
        await mine.disconnect()


async def test_a_session_that_expires_closes_its_sockets_when_it_expires(operator, task, settings):
    settings.CONSOLE_LIVE_RECHECK_SECONDS = 60

    def short_session():
        client = signed_in(operator)
        session = client.session
        session.set_expiry(1)
        session.save()
        return client

    client = await sync_to_async(short_session)()
    communicator = await socket_of(client, f"/ws/tasks/{task.pk}/")
    try:
        waited = await closed_with(communicator, CLOSE_UNAUTHENTICATED, within=4.0)
        assert waited < 2.0
    finally:
        await communicator.disconnect()


async def test_a_socket_with_a_signed_out_session_is_refused_at_connect(operator, task):
    client = await sync_to_async(signed_in)(operator)
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    await sync_to_async(client.post)("/accounts/logout/")
    communicator = WebsocketCommunicator(application, f"/ws/tasks/{task.pk}/", headers=[ORIGIN, (b"cookie", cookie)])
    try:
        await communicator.connect(timeout=5)
        output = await communicator.receive_output(timeout=5)
        assert output["type"] == "websocket.close" and output["code"] == CLOSE_UNAUTHENTICATED
    finally:
        await communicator.disconnect()
        await asyncio.sleep(0)


def test_the_lockout_and_session_words_come_from_the_presenter():
    from recovery.words.signin import lockout_text

    assert "15 minutes" in lockout_text(failures=5, cooloff_minutes=15)
    assert lockout_text(failures=5, cooloff_minutes=None).startswith("Signing in is locked")
