"""The event relay: one per web process.

It tails the Event table in id order and hands each batch to the consumers of
this process that watch the affected organization, task or run. PostgreSQL's
LISTEN/NOTIFY only wakes it early; correctness comes from the tail itself (a
short poll always runs), so a lost notification delays an update, never loses
it. SQLite has no LISTEN: there the relay watches `PRAGMA data_version`, which
changes with every commit of any other connection, and a change wakes it.
Ids that commit out of order (a gap that fills later) are re-read for a
while, so no committed change is missed.
"""

import asyncio
import logging
import time
from collections import defaultdict
from functools import partial

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import connection

from console import alerts, metrics
from console.cards.actions import for_viewer
from console.live.access import check_access
from console.live.snapshots import bulk_snapshot, changes_inbox, inbox_snapshot, nav_count
from console.live.updates import (
    BREAKER_EVENTS,
    DEPENDENT_PARTS,
    board_row_visible,
    board_rows,
    breaker_held_tasks,
    dependents_of,
    leases_of,
    new_board_row,
    run_update,
    shared_update,
    task_update,
)
from tasks import events
from tasks.models import Event

log = logging.getLogger("console.relay")

NOTIFY_CHANNEL = "console_events"
GAP_SECONDS = 30.0  # how long a missing id may still commit (a long transaction)
BATCH = 500
WAL_WATCH_SECONDS = 0.02  # how often the SQLite relay asks whether anyone committed (PRAGMA data_version)
ACCESS_EVENTS = ("member_removed", "member_set")
# A person signed out or changed their password (tasks.accounts.session_ended): re-check their sockets' sessions.
SESSION_EVENTS = ("session_ended",)


def poll_interval() -> float:
    configured = getattr(settings, "CONSOLE_RELAY_POLL_SECONDS", None)
    if configured:
        return float(configured)
    return 2.0 if connection.vendor == "postgresql" else 0.3


def listen_params() -> dict:
    sd = connection.settings_dict
    params = {
        "dbname": sd["NAME"],
        "user": sd.get("USER") or None,
        "password": sd.get("PASSWORD") or None,
        "host": sd.get("HOST") or None,
        "port": sd.get("PORT") or None,
    }
    return {k: v for k, v in params.items() if v}


class Relay:
    def __init__(self):
        self.subscribers: dict[tuple, set] = defaultdict(set)
        self.last_id: int | None = None
        self.gaps: dict[int, float] = {}
        self.task: asyncio.Task | None = None
        self.listener: asyncio.Task | None = None
        self.wake = asyncio.Event()
        self.loop = None
        self.starting: asyncio.Task | None = None
        self.starting_loop = None
        self.rechecker: asyncio.Task | None = None

    # --- subscriptions -----------------------------------------------------------

    async def subscribe(self, consumer) -> None:
        await self.ensure_started()
        for topic in consumer.topics():
            self.subscribers[topic].add(consumer)

    def unsubscribe(self, consumer) -> None:
        for topic in list(self.subscribers):
            self.subscribers[topic].discard(consumer)
            if not self.subscribers[topic]:
                del self.subscribers[topic]

    # --- the loop ------------------------------------------------------------------

    async def ensure_started(self) -> None:
        """Start the one relay loop of this process (again, if its loop changed or it died).

        Sockets connecting at the same moment share one start: the first caller
        creates it, the others await the same future.
        """
        loop = asyncio.get_running_loop()
        if self.task is not None and not self.task.done() and self.loop is loop:
            return
        if self.starting is None or self.starting_loop is not loop:
            self.starting_loop = loop
            self.starting = loop.create_task(self._start(loop))
        await asyncio.shield(self.starting)

    async def _start(self, loop) -> None:
        try:
            for stale in (self.task, self.listener, self.rechecker):
                # A task of another (e.g. closed) loop cannot be cancelled from this one.
                if stale is not None and not stale.done() and stale.get_loop() is loop:
                    stale.cancel()
            self.loop = loop
            self.wake = asyncio.Event()
            self.last_id = await database_sync_to_async(events.last_event_id)()
            self.gaps.clear()
            self.task = loop.create_task(self._run(), name="console-event-relay")
            self.rechecker = loop.create_task(self._recheck_loop(), name="console-access-recheck")
            if connection.vendor == "postgresql":
                self.listener = loop.create_task(self._listen(), name="console-event-listen")
            elif connection.vendor == "sqlite":
                self.listener = loop.create_task(self._watch_wal(), name="console-event-wal")
        finally:
            self.starting = None

    async def _run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self.wake.wait(), timeout=poll_interval())
            except TimeoutError:
                pass
            self.wake.clear()
            if not self.subscribers:
                # Nobody to tell: skip ahead, so a later subscriber is not sent
                # what its page already shows.
                self.last_id = await database_sync_to_async(events.last_event_id)()
                self.gaps.clear()
                continue
            try:
                await self.drain()
            except Exception:  # a failed pass is retried on the next wake; never kill the relay
                log.exception("relay pass failed")
                await asyncio.sleep(1)

    async def _listen(self) -> None:
        """LISTEN on a dedicated connection; any notification wakes the tail."""
        import psycopg

        while True:
            try:
                async with await psycopg.AsyncConnection.connect(**listen_params(), autocommit=True) as conn:
                    await conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    async for _ in conn.notifies():
                        self.wake.set()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("relay LISTEN connection lost; polling until it is back", exc_info=True)
                await asyncio.sleep(2)

    async def _watch_wal(self) -> None:
        """Wake the tail when another connection committed to the SQLite database.

        `PRAGMA data_version` on a connection of our own changes whenever any other connection (of any
        process) has committed since the last look: a read of shared memory, no query of a table, cheap
        enough every few milliseconds. A commit that appended no event (a heartbeat) wakes a tail that
        finds nothing; the poll still runs whatever happens here.
        """
        import sqlite3

        name = str(connection.settings_dict["NAME"])
        if not name or name == ":memory:" or name.startswith("file::memory:"):
            return
        conn = sqlite3.connect(name, timeout=1, check_same_thread=False)
        try:
            seen = conn.execute("PRAGMA data_version").fetchone()[0]
            while True:
                await asyncio.sleep(WAL_WATCH_SECONDS)
                now = conn.execute("PRAGMA data_version").fetchone()[0]
                if now != seen:
                    seen = now
                    self.wake.set()
        finally:
            conn.close()

    async def _recheck_loop(self) -> None:
        """The safety net for access changes that append no event (a task made private, an admin's edit).

        Every CONSOLE_LIVE_RECHECK_SECONDS each distinct (user, page, object) among this process's sockets
        is read once, in an executor thread of its own: the push path (the relay's thread) never waits
        behind 200 sockets' checks, and 200 tabs of one page cost one check. Membership changes made
        through the services are acted on at once by `recheck` (their events).
        """
        while True:
            await asyncio.sleep(float(settings.CONSOLE_LIVE_RECHECK_SECONDS))
            # Live pages only: the workers page's socket is here for session ends and re-reads its access on
            # its own timer (it has no page access to re-read; asking killed this loop, and with it every
            # page's re-check and header warnings).
            consumers = [c for c in self.consumers() if c.subscribed and hasattr(c, "access_key")]
            if not consumers:
                continue
            wanted = {c.access_key(): (c.user, c.page, c.obj_id) for c in consumers}
            try:
                found = await _off_thread(_read_access)(wanted)
            except Exception:
                log.exception("access recheck failed; trying again next interval")
                continue
            for consumer in consumers:
                access = found.get(consumer.access_key())
                if access is not None:
                    await consumer.apply_access(access)
            await self._refresh_alerts([c for c in consumers if c.subscribed])
            await self._refresh_leases([c for c in consumers if c.subscribed])

    async def _refresh_alerts(self, consumers) -> None:
        """The header's warnings on every live page: a supervisor gone silent or queued runs with no worker is
        news no event announces (nothing happens). Read once per distinct set of organizations, sent to a
        page once after it connects and then only when what they say changed."""
        pages = [c for c in consumers if getattr(c, "wants_alerts", False)]
        if not pages:
            return
        groups = {frozenset(c.orgs): c.user for c in pages}
        try:
            found = await _off_thread(_read_alerts)(groups)
        except Exception:
            log.exception("header warnings: reading them failed; trying again next interval")
            return
        for consumer in pages:
            key, html = found[frozenset(consumer.orgs)]
            if key != consumer.alerts_key:
                consumer.alerts_key = key
                await consumer.push_extra(html)

    async def _refresh_leases(self, consumers) -> None:
        """Heartbeats on task and run pages: a heartbeat appends no event, so the lease lines of running runs are
        read here, once per task, and a page gets the lines whose heartbeat or lease moved since it last had
        them — the live card says what a reload says ("last heartbeat 3 s ago", never "no heartbeat yet")."""
        pages = [c for c in consumers if getattr(c, "page", None) in ("task", "run") and c.task_id]
        if not pages:
            return
        try:
            found = await _off_thread(leases_of)({c.task_id for c in pages})
        except Exception:
            log.exception("lease lines: reading them failed; trying again next interval")
            return
        for consumer in pages:
            leases = [
                x for x in found.get(consumer.task_id, ()) if consumer.page == "task" or x.run_id == consumer.obj_id
            ]
            seen = getattr(consumer, "leases_seen", None) or {}
            moved = [x.html for x in leases if seen.get(x.run_id) != x.key]
            consumer.leases_seen = {x.run_id: x.key for x in leases}
            if moved:
                await consumer.push_extra("".join(moved))

    def _fetch(self) -> list[Event]:
        events = []
        while True:
            batch = list(Event.objects.filter(id__gt=self.last_id).order_by("id")[:BATCH])
            events += batch
            if batch:
                self._note_gaps(batch)
                self.last_id = batch[-1].pk
            if len(batch) < BATCH:
                break
        if self.gaps:
            now = time.monotonic()
            late = list(Event.objects.filter(id__in=list(self.gaps)).order_by("id"))
            for e in late:
                self.gaps.pop(e.pk, None)
            self.gaps = {i: t for i, t in self.gaps.items() if now - t < GAP_SECONDS}
            events = sorted(events + late, key=lambda e: e.pk)
        return events

    def _note_gaps(self, batch: list[Event]) -> None:
        expected = self.last_id + 1
        now = time.monotonic()
        for e in batch:
            for missing in range(expected, e.pk):
                self.gaps.setdefault(missing, now)
            expected = e.pk + 1

    def _read(self) -> tuple[list[Event], dict[int, int]]:
        """The new events and the tasks that wait on theirs (dependents_of), in one trip to the database thread."""
        events = self._fetch()
        return events, (dependents_of({e.task_id for e in events if e.task_id}) if events else {})

    async def drain(self) -> None:
        events, moved = await database_sync_to_async(self._read)()
        if events:
            await self.dispatch(events, moved=moved)

    # --- dispatch --------------------------------------------------------------------

    def consumers(self) -> set:
        return set().union(*self.subscribers.values()) if self.subscribers else set()

    async def recheck(self, org_ids: set[int]) -> None:
        """A membership changed: re-check every socket of those organizations before anything is sent."""
        for consumer in [c for c in self.consumers() if c.org_id in org_ids]:
            await consumer.recheck_access()

    async def recheck_sessions(self, user_ids: set[int]) -> None:
        """Sessions of these people ended: each of their sockets checks its own session and closes if it is gone."""
        for consumer in [c for c in self.consumers() if getattr(c.user, "pk", None) in user_ids]:
            await consumer.recheck_access()

    async def dispatch(self, events: list[Event], *, moved: dict[int, int] | None = None) -> None:
        """Render each affected page part once per role (or per user for private tasks) and push it."""
        cursor = max(e.pk for e in events)
        ended = {e.payload.get("user_id") for e in events if e.task_id is None and e.kind in SESSION_EVENTS}
        if ended:
            await self.recheck_sessions(ended)
        by_task: dict[int, list[Event]] = defaultdict(list)
        by_org: dict[int, set[int]] = defaultdict(set)
        created: set[int] = set()
        access_changed = {e.org_id for e in events if e.task_id is None and e.kind in ACCESS_EVENTS}
        if access_changed:
            await self.recheck(access_changed)
        for e in events:
            if e.task_id:
                by_task[e.task_id].append(e)
                by_org[e.org_id].add(e.task_id)
                if e.kind == "task_created":
                    created.add(e.task_id)

        # Tasks that wait on a changed task: their gate and their "Waits on" line follow it (no event of theirs).
        if moved is None:
            moved = await database_sync_to_async(dependents_of)(set(by_task))
        for task_id, org_id in moved.items():
            by_org[org_id].add(task_id)
        # A breaker opened, half-opened or closed: the header's warning of every page of its organization, and
        # the rows of the tasks it holds (or lets go).
        breaker_orgs = {e.org_id for e in events if e.kind in BREAKER_EVENTS}
        if breaker_orgs:
            held = await database_sync_to_async(breaker_held_tasks)(events)
            for task_id, org_id in held.items():
                by_org[org_id].add(task_id)
            await self._refresh_alerts([c for c in self.consumers() if c.subscribed and set(c.orgs) & breaker_orgs])

        # Boards: one render of each changed row (with or without its selection checkbox), filtered per
        # socket by visibility.
        for org_id, task_ids in by_org.items():
            boards = list(self.subscribers.get(("org", org_id), ()))
            if not boards:
                continue
            renders: dict[bool, dict] = {}
            for consumer in boards:
                if consumer.selectable not in renders:
                    renders[consumer.selectable] = await database_sync_to_async(board_rows)(
                        task_ids, viewer=consumer.user, selectable=consumer.selectable
                    )
                rows = renders[consumer.selectable]
                parts = []
                for tid, row in rows.items():
                    if not board_row_visible(row, consumer.user, consumer.role):
                        continue
                    parts.append(new_board_row(row) if tid in created and consumer.lists_new else row.html)
                if parts:
                    await consumer.push("".join(parts), cursor)

        # Task and run pages: one render per audience (page, organization, role, private viewer), shared by its
        # sockets; each audience's sockets get their frame as soon as its render is done.
        for task_id, task_events in [*by_task.items(), *((t, []) for t in moved)]:
            run_ids = {e.run_id for e in task_events if e.run_id}
            run_ids |= {e.payload.get("continues") for e in task_events if e.payload.get("continues")}
            new_runs = {e.run_id for e in task_events if e.kind == "run_queued" and e.run_id}
            kinds = {e.kind for e in task_events}
            audiences: dict[tuple, list] = defaultdict(list)
            for consumer in list(self.subscribers.get(("task", task_id), ())):
                if consumer.page == "run" and consumer.obj_id not in run_ids:
                    continue
                audiences[consumer.render_key()].append(consumer)
            for (page, obj_id, org_id, role, _private_viewer), sockets in audiences.items():
                if page == "task":
                    render = partial(
                        task_update,
                        task_id,
                        run_ids=run_ids,
                        new_run_ids=new_runs,
                        kinds=kinds,
                        parts=None if task_events else DEPENDENT_PARTS,
                    )
                else:
                    render = partial(run_update, obj_id)
                html = await database_sync_to_async(shared_update)(render, sockets[0].user, org_id=org_id, role=role)
                if html is None:
                    # The renderer's role moved since its socket's access check: nothing is shared; each socket
                    # gets its own render (until the re-check that follows a role change closes or updates it).
                    for consumer in sockets:
                        own = await database_sync_to_async(render)(viewer=consumer.user)
                        if own:
                            await consumer.push(own, cursor)
                    continue
                if html:
                    for consumer in sockets:
                        await consumer.push(for_viewer(html, consumer.user), cursor)
        await self.dispatch_triage(events, cursor)
        metrics.observe_pushed(events)

    async def dispatch_triage(self, events: list[Event], cursor: int) -> None:
        """Bulk pages get their progress and ledger; inboxes their list; every live page the inbox count."""
        by_bulk: set[int] = set()
        inbox_orgs: set[int] = set()
        for e in events:
            bulk = e.payload.get("bulk") if isinstance(e.payload, dict) else None
            if isinstance(bulk, int) and e.kind.startswith("bulk_"):
                by_bulk.add(bulk)
            if changes_inbox(e.kind):
                inbox_orgs.add(e.org_id)
        for op_id in sorted(by_bulk):
            renders: dict[tuple, str] = {}
            for consumer in list(self.subscribers.get(("bulk", op_id), ())):
                # Counts and items are those each reader may see, on the ledger page they have open.
                key = (consumer.user.pk, tuple(sorted(consumer.filters.items())))
                if key not in renders:
                    renders[key] = await database_sync_to_async(bulk_snapshot)(consumer.user, op_id, consumer.filters)
                if renders[key]:
                    await consumer.push(renders[key], cursor)
        if not inbox_orgs:
            return
        counts: dict[int, str] = {}
        done = set()
        for org_id in sorted(inbox_orgs):
            for consumer in list(self.subscribers.get(("inbox", org_id), ())):
                if consumer in done:
                    continue
                done.add(consumer)
                html = await database_sync_to_async(inbox_snapshot)(consumer.user)
                await consumer.push(html, cursor)
            for consumer in list(self.subscribers.get(("nav", org_id), ())):
                if consumer in done:
                    continue
                done.add(consumer)
                key = consumer.user.pk
                if key not in counts:
                    counts[key] = await database_sync_to_async(nav_count)(consumer.user)
                await consumer.push_extra(counts[key])


def _off_thread(fn):
    """`fn` in an executor thread of the loop (not the relay's), its connection handed back to the pool on return.

    channels' database_sync_to_async closes a thread's connections around each call, but its test communicator
    turns that close into a no-op while a test awaits it, and the loop's executor threads outlive the call: in
    the full PostgreSQL suite each kept a pool connection until the pool ran dry. Closing here, in the thread
    that opened it, costs nothing in production (with CONN_MAX_AGE 0 the connection goes back to the pool anyway).
    """

    def closing(*args):
        try:
            return fn(*args)
        finally:
            connection.close()

    return database_sync_to_async(closing, thread_sensitive=False)


def _read_access(wanted: dict) -> dict:
    return {key: check_access(user, page, obj_id) for key, (user, page, obj_id) in wanted.items()}


def _read_alerts(groups: dict) -> dict:
    """{organizations: (what the warnings say, the header's warnings as an out-of-band swap)}."""
    out = {}
    for org_ids, user in groups.items():
        said = alerts.alerts_of_orgs(org_ids)
        out[org_ids] = (alerts.alerts_key(said), alerts.render_alerts(user, alerts=said, oob=True).strip())
    return out


relay = Relay()
