"""The websocket of a live page: subscribe after checking access, forward rendered HTML, resync on request.

No business logic: what to render comes from console.live, what changed from the relay.
"""

import json
import logging
from urllib.parse import parse_qs

from channels.auth import get_user
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from console import live
from console.relay import relay

log = logging.getLogger("console.consumers")

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403


class LiveConsumer(AsyncWebsocketConsumer):
    page = "board"  # "board" | "task" | "run": one subclass per route

    async def connect(self):
        self.obj_id = self.scope["url_route"]["kwargs"].get("obj_id")
        query = parse_qs(self.scope.get("query_string", b"").decode())
        self.filters = {"state": (query.get("state") or ["all"])[0], "q": (query.get("q") or [""])[0]}
        self.subscribed = False
        # The newest event the page is known to reflect: the page says so in the URL
        # (and again in each resync), so a batch it already shows is never pushed.
        try:
            self.page_cursor = int((query.get("after") or ["0"])[0])
        except ValueError:
            self.page_cursor = 0
        self.user = await get_user(self.scope)
        await self.accept()
        if not self.user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        access = await database_sync_to_async(live.check_access)(self.user, self.page, self.obj_id)
        if not access.ok:
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.org_id, self.role, self.task_id = access.org_id, access.role, access.task_id
        self.private = access.private
        # Subscribe before any snapshot is taken, so no event falls between them. The relay re-reads
        # every socket's access on a schedule of its own (the safety net for changes with no event).
        await relay.subscribe(self)
        self.subscribed = True

    async def disconnect(self, code):
        if self.subscribed:
            relay.unsubscribe(self)
            self.subscribed = False

    # --- what the relay needs ---------------------------------------------------------

    def topics(self) -> list[tuple]:
        if self.page == "board":
            return [("org", self.org_id)]
        return [("task", self.task_id)]

    def render_key(self) -> tuple:
        return (self.page, self.obj_id, self.role, self.user.pk if self.private else None)

    @property
    def lists_new(self) -> bool:
        return self.page == "board" and self.filters["state"] == "all" and not self.filters["q"]

    async def push(self, html: str, cursor: int) -> None:
        # A batch the page already reflects would only redraw cards (and reset a
        # half-filled form) with the same state: drop it.
        if self.subscribed and cursor > self.page_cursor:
            self.page_cursor = cursor
            await self.send(text_data=html + live.cursor_fragment(cursor))

    # --- the page's requests ---------------------------------------------------------

    async def receive(self, text_data=None, bytes_data=None):
        try:
            message = json.loads(text_data or "{}")
        except ValueError:
            return
        if not isinstance(message, dict):
            return
        if message.get("type") != "resync" or not self.subscribed:
            return
        try:
            after = int(message.get("last_event") or 0)
        except (TypeError, ValueError):
            after = 0
        reconnect = bool(message.get("reconnect"))
        self.page_cursor = max(self.page_cursor, after)
        html, cursor = await database_sync_to_async(self._resync)(after, reconnect)
        if html and self.subscribed:
            self.page_cursor = max(self.page_cursor, cursor)
            await self.send(text_data=html)

    def _resync(self, after: int, reconnect: bool) -> tuple[str, int]:
        """Every card of the page from saved state, when the page may be behind (always after a reconnect)."""
        if not reconnect and not live.changed_since(self.page, org_id=self.org_id, task_id=self.task_id, after=after):
            return "", after
        cursor = live.last_event_id()
        html = live.render_page_for(live.fresh(self.user), self.page, self.obj_id, self.filters)
        notice = live.notice_fragment() if reconnect else ""
        return html + notice + live.cursor_fragment(cursor), cursor

    async def recheck_access(self) -> bool:
        """Re-read this user's access now (a membership changed); close with 4403 if it is gone."""
        if not self.subscribed:
            return False
        access = await database_sync_to_async(live.check_access)(self.user, self.page, self.obj_id)
        return await self.apply_access(access)

    def access_key(self) -> tuple:
        return (self.user.pk, self.page, self.obj_id)

    async def apply_access(self, access) -> bool:
        """Act on a fresh reading of the access: close with 4403 if it is gone, else take the role and privacy."""
        if not self.subscribed:
            return False
        live.fresh(self.user)  # renders re-read the memberships of this socket's user
        if not access.ok:
            relay.unsubscribe(self)
            self.subscribed = False
            await self.close(code=CLOSE_FORBIDDEN)
            return False
        self.role, self.private = access.role, access.private
        return True


class BoardConsumer(LiveConsumer):
    page = "board"


class TaskConsumer(LiveConsumer):
    page = "task"


class RunConsumer(LiveConsumer):
    page = "run"
