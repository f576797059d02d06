"""The websocket of a live page: subscribe after checking access, forward rendered HTML, resync on request.

No business logic: what to render comes from console.live, what changed from the relay.
"""

import asyncio
import json
import logging
import time
from urllib.parse import parse_qs

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.contrib.auth.models import AnonymousUser
from django.utils import timezone

from console.live.access import admit, check_access, forget_memberships, session_state
from console.live.relay import relay
from console.live.snapshots import can_select, changed_since, cursor_fragment, notice_fragment, render_page_for
from recovery.triage.filters import BOARD_PARAMS, board_filter
from tasks import events, payloads

log = logging.getLogger("console.consumers")

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
# Resync requests beyond the budget below: the page asked for more full redraws than any page needs.
CLOSE_THROTTLED = 4429
# A page asks once per (re)connect; a burst of this many is allowed, then one per RESYNC_REFILL_SECONDS.
RESYNC_BURST = 5
RESYNC_REFILL_SECONDS = 2.0
MAX_CURSOR = 2**63 - 1


def cursor_value(raw) -> int:
    """An event id a page says it reflects: anything that is not a sane non-negative integer is 0."""
    if isinstance(raw, bool):
        return 0
    if isinstance(raw, float) and raw.is_integer():
        raw = int(raw)
    if isinstance(raw, str) and raw.isascii() and raw.isdigit() and len(raw) <= 19:
        raw = int(raw)
    return raw if isinstance(raw, int) and 0 <= raw <= MAX_CURSOR else 0


class ResyncBudget:
    """A token bucket per socket (a socket lives in one process, so memory is the right place)."""

    def __init__(self, burst: int = RESYNC_BURST, refill: float = RESYNC_REFILL_SECONDS, clock=time.monotonic):
        self.burst, self.refill, self.clock = burst, refill, clock
        self.tokens, self.at = float(burst), clock()

    def take(self) -> bool:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.at) / self.refill)
        self.at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


# What a page's URL may say about what it shows: the board's filter, the bulk ledger's page.
FILTER_PARAMS = (*BOARD_PARAMS, "result", "pos")


class SocketConsumer(AsyncWebsocketConsumer):
    """A websocket whose handshake never waits on the database thread.

    channels' dispatch runs Django's close_old_connections before every message, on the one thread every
    consumer of the process shares for the database: the handshake (`websocket.connect`) then waits its turn
    behind every other socket's reads and renders, and under a burst daphne drops it unaccepted. Here each
    database call already closes stale connections around itself (channels' database_sync_to_async), so that
    hop is left out; connect() accepts before its first database call.
    """

    async def dispatch(self, message):
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)


class LiveConsumer(SocketConsumer):
    page = "board"  # "board" | "task" | "run" | "inbox" | "bulk": one subclass per route

    async def connect(self):
        self.obj_id = self.scope["url_route"]["kwargs"].get("obj_id")
        query = parse_qs(self.scope.get("query_string", b"").decode("utf-8", "replace"))
        # A filter value with what text cannot hold matches nothing anyone typed: it is dropped, never looked up.
        self.filters = {
            k: query[k][0][:200] for k in FILTER_PARAMS if query.get(k) and payloads.is_plain(query[k][0][:200])
        }
        self.subscribed = False
        self.watchdog = None
        self.resyncs = ResyncBudget()
        # The newest event the page is known to reflect: the page says so in the URL
        # (and again in each resync), so a batch it already shows is never pushed.
        self.page_cursor = cursor_value((query.get("after") or ["0"])[0])
        self.user = AnonymousUser()
        # Accept before anything touches the database: daphne drops a handshake not accepted within its
        # --websocket_connect_timeout, and an outage's reconnect burst queues every socket's reads behind the
        # others' on the one database thread. The page sends nothing that is answered before this connect
        # returns (a consumer handles its messages in order), and a refusal is a close with its code either way.
        await self.accept()
        session = self.scope.get("session")
        admission = await database_sync_to_async(admit)(getattr(session, "session_key", None), self.page, self.obj_id)
        if admission.user is None:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        self.user, access = admission.user, admission.access
        if not access.ok:
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.session_expires_at = admission.session.expires_at
        self.org_id, self.role, self.task_id = access.org_id, access.role, access.task_id
        self.private = access.private
        self.orgs = admission.orgs
        # What the header's warnings say on this page as far as the relay knows: nothing yet, so its next re-read
        # (within CONSOLE_LIVE_RECHECK_SECONDS) sends them once, then only when they change. Not read here:
        # a query more per connect queues 200 opening sockets behind each other on the one database thread.
        self.alerts_key = None
        self.wants_alerts = True
        # Subscribe before any snapshot is taken, so no event falls between them. The relay re-reads
        # every socket's access on a schedule of its own (the safety net for changes with no event);
        # the socket itself watches only its session's expiry, which no event announces.
        await relay.subscribe(self)
        self.subscribed = True
        self.watchdog = asyncio.create_task(self._session_expiry())

    async def disconnect(self, code):
        if self.subscribed:
            relay.unsubscribe(self)
            self.subscribed = False
        if self.watchdog:
            self.watchdog.cancel()

    # --- what the relay needs ---------------------------------------------------------

    def topics(self) -> list[tuple]:
        # ("nav", org): the navigation's inbox count, on every live page.
        nav = [("nav", org) for org in self.orgs]
        if self.page == "board":
            return [("org", self.org_id), *nav]
        if self.page == "inbox":
            return [("inbox", org) for org in self.orgs]
        if self.page == "bulk":
            return [("bulk", self.obj_id), *nav]
        return [("task", self.task_id), *nav]

    def render_key(self) -> tuple:
        """The audience of a task or run page: the sockets that are sent one shared render. Everything a card's
        render reads of its viewer: the organization and the role (what it may do, console.cards), and on a private
        task the viewer themself (who may see it at all is theirs alone; tasks.selectors.task_visible_to)."""
        return (self.page, self.obj_id, self.org_id, self.role, self.user.pk if self.private else None)

    @property
    def selectable(self) -> bool:
        return can_select(self.role)

    @property
    def lists_new(self) -> bool:
        """A new task goes on top of this board: it lists every task, newest change first."""
        if self.page != "board":
            return False
        _, f = board_filter(self.filters)
        return f.state == "all" and not f.narrowed and f.sort == "recent"

    async def push_extra(self, html: str) -> None:
        """A fragment that carries no page state (the navigation's count): sent as is, the cursor untouched."""
        if self.subscribed:
            await self.send(text_data=html)

    async def push(self, html: str, cursor: int) -> None:
        # A batch the page already reflects would only redraw cards (and reset a
        # half-filled form) with the same state: drop it.
        if self.subscribed and cursor > self.page_cursor:
            self.page_cursor = cursor
            await self.send(text_data=html + cursor_fragment(cursor))

    # --- the page's requests ---------------------------------------------------------

    async def receive(self, text_data=None, bytes_data=None):
        try:
            message = json.loads(text_data or "{}")
        except (ValueError, RecursionError):
            return
        if not isinstance(message, dict):
            return
        if message.get("type") != "resync" or not self.subscribed:
            return
        if not self.resyncs.take():
            log.warning("closing a socket of %s: too many resync requests", self.user)
            relay.unsubscribe(self)
            self.subscribed = False
            await self.close(code=CLOSE_THROTTLED)
            return
        after = cursor_value(message.get("last_event"))
        reconnect = bool(message.get("reconnect"))
        self.page_cursor = max(self.page_cursor, after)
        html, cursor = await database_sync_to_async(self._resync)(after, reconnect)
        if html and self.subscribed:
            self.page_cursor = max(self.page_cursor, cursor)
            await self.send(text_data=html)

    def _resync(self, after: int, reconnect: bool) -> tuple[str, int]:
        """Every card of the page from saved state, when the page may be behind (always after a reconnect)."""
        if not reconnect and not changed_since(
            self.page, org_id=self.org_id, task_id=self.task_id, after=after, obj_id=self.obj_id
        ):
            return "", after
        cursor = events.last_event_id()
        html = render_page_for(forget_memberships(self.user), self.page, self.obj_id, self.filters, self.role)
        notice = notice_fragment() if reconnect else ""
        return html + notice + cursor_fragment(cursor), cursor

    async def session_alive(self) -> bool:
        """Whether the session this socket opened with still signs its user in (console.live.access.session_state)."""
        session = self.scope.get("session")
        state = await database_sync_to_async(session_state)(getattr(session, "session_key", None), self.user)
        self.session_expires_at = state.expires_at
        return state.valid

    async def recheck_access(self) -> bool:
        """Re-read this user's session and access; close with 4401 (signed out, password changed, session expired)
        or 4403 (access gone). Returns whether the socket remains."""
        if not self.subscribed:
            return False
        if not await self.session_alive():
            relay.unsubscribe(self)
            self.subscribed = False
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return False
        access = await database_sync_to_async(check_access)(self.user, self.page, self.obj_id)
        return await self.apply_access(access)

    def access_key(self) -> tuple:
        return (self.user.pk, self.page, self.obj_id)

    async def apply_access(self, access) -> bool:
        """Act on a fresh reading of the access (the relay's periodic check, shared by every socket of the same
        user and page): close with 4403 if it is gone, else take the role and privacy."""
        if not self.subscribed:
            return False
        forget_memberships(self.user)  # renders re-read the memberships of this socket's user
        if not access.ok:
            relay.unsubscribe(self)
            self.subscribed = False
            await self.close(code=CLOSE_FORBIDDEN)
            return False
        self.role, self.private = access.role, access.private
        return True

    async def _session_expiry(self) -> None:
        """Close the socket the moment its session expires; a session extended meanwhile is followed."""
        try:
            while self.subscribed and self.session_expires_at is not None:
                left = (self.session_expires_at - timezone.now()).total_seconds()
                await asyncio.sleep(max(0.0, left) + 0.01)
                if not await self.recheck_access():
                    return
        except asyncio.CancelledError:
            pass


class BoardConsumer(LiveConsumer):
    page = "board"


class TaskConsumer(LiveConsumer):
    page = "task"


class RunConsumer(LiveConsumer):
    page = "run"


class InboxConsumer(LiveConsumer):
    page = "inbox"


class BulkConsumer(LiveConsumer):
    page = "bulk"
