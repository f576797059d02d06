"""The workers page's websocket: it re-renders the page on a timer.

Why a timer and not the relay: what this page shows (heartbeats, claim polls,
supervisor passes) is bookkeeping that appends no Event, by design, so there is
nothing for the relay to tail. Re-rendering one page every few seconds for the
few people who watch it costs a handful of queries per tick; a push is sent only
when the HTML changed. Each tick re-reads the user's memberships, so a removed
member's socket closes (4403) at the next tick.
"""

import asyncio
import json

from channels.db import database_sync_to_async
from django.contrib.auth.models import AnonymousUser

from console import alerts
from console.live.access import admit, forget_memberships, session_state
from console.live.consumers import CLOSE_THROTTLED, ResyncBudget, SocketConsumer
from console.live.relay import relay
from console.live.snapshots import notice_fragment
from console.views.ops import render_workers_body
from tasks.selectors import memberships_of

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
REFRESH_SECONDS = 2.0


def render_update(user, *, reconnect: bool = False) -> str | None:
    """The page's body and the header warnings as out-of-band swaps; None once access is gone."""
    forget_memberships(user)
    if not memberships_of(user):
        return None
    html = render_workers_body(user, oob=True).strip() + alerts.render_alerts(user, oob=True).strip()
    return html + (notice_fragment() if reconnect else "")


class WorkersConsumer(SocketConsumer):
    refresh_seconds = REFRESH_SECONDS

    async def connect(self):
        self.ticker = None
        self.last_html = ""
        self.subscribed = False
        self.org_id = None  # the relay re-checks it for session ends only (tasks.accounts.session_ended)
        self.resyncs = ResyncBudget()
        self.user = AnonymousUser()
        await self.accept()  # first, as every live page's socket (console.live.consumers.LiveConsumer.connect)
        session = self.scope.get("session")
        admission = await database_sync_to_async(admit)(getattr(session, "session_key", None), "workers", None)
        if admission.user is None:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        self.user = admission.user
        if not admission.access.ok:
            await self.close(code=CLOSE_FORBIDDEN)
            return
        await relay.subscribe(self)
        self.subscribed = True
        self.ticker = asyncio.create_task(self._tick())

    def topics(self) -> list[tuple]:
        return [("user", self.user.pk)]  # never pushed to: the page re-renders on its timer

    async def disconnect(self, code):
        if self.subscribed:
            relay.unsubscribe(self)
            self.subscribed = False
        if self.ticker:
            self.ticker.cancel()

    async def session_alive(self) -> bool:
        session = self.scope.get("session")
        state = await database_sync_to_async(session_state)(getattr(session, "session_key", None), self.user)
        return state.valid

    async def recheck_access(self) -> bool:
        """The relay's call when this person's session ended elsewhere: close at once if it was this one."""
        if await self.session_alive():
            return True
        await self._close(CLOSE_UNAUTHENTICATED)
        return False

    async def _close(self, code: int) -> None:
        if self.subscribed:
            relay.unsubscribe(self)
            self.subscribed = False
        await self.close(code=code)

    async def receive(self, text_data=None, bytes_data=None):
        # The page asks for a resync on every (re)connect: send the current state at once.
        try:
            message = json.loads(text_data or "{}")
        except (ValueError, RecursionError):
            return
        if isinstance(message, dict) and message.get("type") == "resync":
            if not self.resyncs.take():
                await self._close(CLOSE_THROTTLED)
                return
            await self.refresh(force=True, reconnect=message.get("reconnect") is True)

    async def refresh(self, *, force: bool = False, reconnect: bool = False) -> bool:
        if not await self.session_alive():
            await self._close(CLOSE_UNAUTHENTICATED)
            return False
        html = await database_sync_to_async(render_update)(self.user, reconnect=reconnect)
        if html is None:
            await self._close(CLOSE_FORBIDDEN)
            return False
        if force or html != self.last_html:
            self.last_html = html
            await self.send(text_data=html)
        return True

    async def _tick(self):
        try:
            while True:
                await asyncio.sleep(self.refresh_seconds)
                if not await self.refresh():
                    return
        except asyncio.CancelledError:
            pass
