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

from channels.auth import get_user
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from console import live, ops
from tasks.selectors import memberships_of

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
REFRESH_SECONDS = 2.0


def _oob(html: str) -> str:
    head, sep, rest = html.strip().partition(">")
    return f'{head} hx-swap-oob="true"{sep}{rest}'


def render_update(user, *, reconnect: bool = False) -> str | None:
    """The page's body and the header warnings as out-of-band swaps; None once access is gone."""
    live.fresh(user)
    if not memberships_of(user):
        return None
    html = _oob(ops.render_workers_body(user)) + _oob(ops.render_alerts(user))
    return html + (live.notice_fragment() if reconnect else "")


class WorkersConsumer(AsyncWebsocketConsumer):
    refresh_seconds = REFRESH_SECONDS

    async def connect(self):
        self.ticker = None
        self.last_html = ""
        self.user = await get_user(self.scope)
        await self.accept()
        if not self.user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        if not await database_sync_to_async(lambda: bool(memberships_of(live.fresh(self.user))))():
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.ticker = asyncio.create_task(self._tick())

    async def disconnect(self, code):
        if self.ticker:
            self.ticker.cancel()

    async def receive(self, text_data=None, bytes_data=None):
        # The page asks for a resync on every (re)connect: send the current state at once.
        try:
            message = json.loads(text_data or "{}")
        except ValueError:
            return
        if isinstance(message, dict) and message.get("type") == "resync":
            await self.refresh(force=True, reconnect=bool(message.get("reconnect")))

    async def refresh(self, *, force: bool = False, reconnect: bool = False) -> bool:
        html = await database_sync_to_async(render_update)(self.user, reconnect=reconnect)
        if html is None:
            await self.close(code=CLOSE_FORBIDDEN)
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
