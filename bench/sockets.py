"""Live pages at 200 sockets, against a real daphne on the bench database.

push_p99_vs_channel_rtt: 200 websockets on one task page; a change is committed through the service (a
pause or resume) and, per socket, the time from the commit returning to the fragment carrying that
commit's event arriving; p99 over every socket of every commit. Beside it, interleaved commit by commit,
the bare channel layer: `group_send` to 200 receivers of an InMemoryChannelLayer in this process, p99 of
the time until each receiver has its message.

reconnect_200: 200 pages whose sockets drop and reconnect, each asking to resync from its cursor (the
server re-renders every card of the page from saved state), until all 200 have their fresh cards; beside
it, 200 fresh page loads: `GET` of the page (its first render) and its socket opened, until all 200 are
done. Alternating, median of each side.

A socket is accepted before the server reads who it is for (console.consumers), so an open socket is not yet
subscribed: nothing is committed, and no round begins, until every page's socket is (the relay sends each
subscribed page the header's warnings once, within CONSOLE_LIVE_RECHECK_SECONDS). A commit landing among
200 subscribing sockets would turn each of their resyncs into a full render and measure that instead.
"""

from __future__ import annotations

import asyncio
import gc
import random
import time

from bench.core import Context, figure, median, percentile, record

SOCKETS = 200
COMMITS = 30
RECONNECT_ROUNDS = 3  # per side
CONCURRENCY = 50  # connections opened at once, as a burst of browsers would


async def group_send_round(layer, channels: list[str]) -> list[float]:
    """One group_send to every channel of the group; the time until each has its message."""
    started = time.perf_counter()

    async def receive(channel):
        await layer.receive(channel)
        return time.perf_counter() - started

    waiting = [asyncio.ensure_future(receive(c)) for c in channels]
    await asyncio.sleep(0)
    started = time.perf_counter()
    await layer.group_send("bench", {"type": "bench.ping"})
    return list(await asyncio.gather(*waiting))


class Probe:
    """One page's socket: every message with the time it arrived."""

    def __init__(self, ws):
        self.ws = ws
        self.inbox: list[tuple[float, str]] = []
        self.arrived = asyncio.Event()
        self.seen = 0
        self.pump = asyncio.ensure_future(self._pump())

    async def _pump(self) -> None:
        while (message := await self.ws.recv()) is not None:
            self.inbox.append((time.perf_counter(), message))
            self.arrived.set()
        self.arrived.set()

    async def first(self, needle: str) -> float:
        """When the first not yet seen message containing needle arrived."""
        while True:
            for i in range(self.seen, len(self.inbox)):
                if needle in self.inbox[i][1]:
                    self.seen = i + 1
                    return self.inbox[i][0]
            if self.ws.close_code is not None:
                raise ConnectionError(f"socket closed with {self.ws.close_code}")
            self.arrived.clear()
            await self.arrived.wait()

    async def close(self) -> None:
        await self.ws.close()
        self.pump.cancel()
        await asyncio.gather(self.pump, return_exceptions=True)


def _last_event() -> int:
    from django.db import connections

    from tasks.events import last_event_id

    try:
        return last_event_id()
    finally:
        connections.close_all()


def _toggle(task_id: int, user) -> tuple[float, int]:
    """Pause or resume (whichever changes something); when it committed and the id of its event."""
    from django.db import connections

    from tasks.models import Event, Task
    from tasks.services import task_pause, task_resume

    try:
        task = Task.objects.get(pk=task_id)
        (task_resume if task.paused else task_pause)(actor=user, task=task)
        committed = time.perf_counter()
        return committed, Event.objects.filter(task_id=task_id).order_by("-id").values_list("id", flat=True)[0]
    finally:
        connections.close_all()


class Live:
    def __init__(self, server, task_id: int, session: str):
        self.server, self.task_id, self.session = server, task_id, session
        self.url = f"ws://127.0.0.1:{server.port}/ws/tasks/{task_id}/"
        self.gate = asyncio.Semaphore(CONCURRENCY)

    async def socket(self, *, resync: dict | None = None) -> Probe:
        from tests.live.wsclient import WebSocket

        async with self.gate:
            ws = await WebSocket.connect(
                self.url, origin=self.server.url, cookie=f"sessionid={self.session}", timeout=60
            )
            probe = Probe(ws)
            if resync is not None:
                await ws.send_json({"type": "resync", **resync})
            return probe

    async def page_load(self, client, cursor: int) -> Probe:
        """A fresh page: its first render over HTTP, then its socket (whose resync has nothing to send)."""
        async with self.gate:
            response = await client.get(f"/tasks/{self.task_id}/")
            if response.status_code != 200:
                raise RuntimeError(f"GET /tasks/{self.task_id}/ answered {response.status_code}")
        return await self.socket(resync={"last_event": cursor, "reconnect": False})


async def _subscribed(probes: list[Probe], timeout: float = 120) -> None:
    """Until every socket is subscribed: the header's warnings, which the relay sends a page once it is."""
    try:
        await asyncio.wait_for(asyncio.gather(*(p.first('id="ops-alerts"') for p in probes)), timeout)
    except TimeoutError:
        got = sum(any('id="ops-alerts"' in m for _, m in p.inbox) for p in probes)
        raise RuntimeError(f"{got} of {len(probes)} sockets subscribed within {timeout:.0f} s") from None


async def _commit_round(probes: list[Probe], task_id: int, user) -> list[float]:
    committed, event_id = await asyncio.to_thread(_toggle, task_id, user)
    needle = f'data-last-event="{event_id}"'
    try:
        arrivals = await asyncio.wait_for(asyncio.gather(*(p.first(needle) for p in probes)), 60)
    except TimeoutError:
        got = sum(any(needle in m for _, m in p.inbox) for p in probes)
        raise RuntimeError(f"event {event_id} reached {got} of {len(probes)} sockets within 60 s") from None
    return [t - committed for t in arrivals]


async def _measure(ctx: Context, server, task_id: int, user, session: str) -> dict:
    import httpx
    from channels.layers import InMemoryChannelLayer

    live = Live(server, task_id, session)
    layer = InMemoryChannelLayer(capacity=1000)
    channels = [await layer.new_channel() for _ in range(SOCKETS)]
    for channel in channels:
        await layer.group_add("bench", channel)

    cursor = await asyncio.to_thread(_last_event)
    probes = await asyncio.gather(
        *(live.socket(resync={"last_event": cursor, "reconnect": False}) for _ in range(SOCKETS))
    )
    await _subscribed(probes)
    out = {"push": [], "fanout": [], "reconnect": [], "fresh": [], "last": []}
    # The measuring process's own garbage collector would stall whichever side it hits: keep it out.
    gc.collect()
    gc.disable()
    try:
        await _commit_round(probes, task_id, user)  # unmeasured: proves every subscription is in place
        await group_send_round(layer, channels)
        push_deadline = ctx.deadline - ctx.budget * 0.45  # leave the rest for the reconnects
        for k in range(COMMITS):
            if time.monotonic() > push_deadline and out["push"]:
                break
            await asyncio.sleep(random.uniform(0.05, 0.3))  # commit at a random moment, not in step with a poll
            pair = [lambda: _commit_round(probes, task_id, user), lambda: group_send_round(layer, channels)]
            for which in (0, 1) if k % 2 == 0 else (1, 0):
                samples = await pair[which]()
                out["push" if which == 0 else "fanout"] += samples
                if which == 0:
                    out["last"].append(max(samples))

        cookies = {"sessionid": session}
        async with httpx.AsyncClient(base_url=server.url, cookies=cookies, timeout=60) as client:
            for k in range(RECONNECT_ROUNDS):
                if ctx.left() < 10 and out["reconnect"] and out["fresh"]:
                    break
                for side in ("reconnect", "fresh") if k % 2 == 0 else ("fresh", "reconnect"):
                    cursor = await asyncio.to_thread(_last_event)
                    await asyncio.gather(*(p.close() for p in probes))
                    started = time.perf_counter()
                    if side == "reconnect":
                        probes = await asyncio.gather(
                            *(live.socket(resync={"last_event": cursor, "reconnect": True}) for _ in range(SOCKETS))
                        )
                        await asyncio.wait_for(asyncio.gather(*(p.first('id="live-notice"') for p in probes)), 120)
                    else:
                        probes = await asyncio.gather(*(live.page_load(client, cursor) for _ in range(SOCKETS)))
                    out[side].append(time.perf_counter() - started)
                    if side == "fresh":
                        await _subscribed(probes)  # unmeasured: no subscription left over for the next round
    finally:
        gc.enable()
        await asyncio.gather(*(p.close() for p in probes), return_exceptions=True)
    return out


@figure("push_p99_vs_channel_rtt", "reconnect_200", budget=150, order=80, group="sockets")
def sockets(ctx: Context):
    from django.db import connection

    from bench.core import BENCH_DIR
    from bench.fixtures import org_with_people, session_cookie
    from tasks import services
    from tests.processes import Server

    org, agent, operator, _ = org_with_people("bench-sockets")
    task = services.task_create(
        org=org, actor="bench", title="fan-out", agent=agent.name, input={"steps": [{"tool": "sleep", "args": {}}]}
    )
    session = session_cookie(operator)
    connection.close()
    server = Server(log=BENCH_DIR / "daphne-sockets.log").start()
    try:
        out = asyncio.run(_measure(ctx, server, task.pk, operator, session))
    finally:
        server.stop()
    poll = "woken by LISTEN/NOTIFY" if ctx.postgres else "woken by SQLite's data_version"
    return [
        record(
            "push_p99_vs_channel_rtt",
            value=percentile(out["push"], 99) * 1000,
            unit="ms",
            baseline=f"bare group_send to {SOCKETS} receivers, p99",
            baseline_value=percentile(out["fanout"], 99) * 1000,
            target_ratio=3.0,
            better="lower",
            note=f"commit → fragment on {SOCKETS} sockets of one task page ({poll}), p99 of "
            f"{len(out['push'])} arrivals over {len(out['push']) // SOCKETS} commits; p50 / p90 / max "
            f"{percentile(out['push'], 50) * 1000:.0f} / {percentile(out['push'], 90) * 1000:.0f} / "
            f"{max(out['push']) * 1000:.0f} ms vs {percentile(out['fanout'], 50) * 1000:.1f} / "
            f"{percentile(out['fanout'], 90) * 1000:.1f} / {max(out['fanout']) * 1000:.1f} ms; last socket of "
            f"each commit, median {median(out['last']) * 1000:.0f} ms",
        ),
        record(
            "reconnect_200",
            value=median(out["reconnect"]),
            unit="s",
            baseline=f"{SOCKETS} fresh page loads (GET + socket)",
            baseline_value=median(out["fresh"]),
            target_ratio=1.5,
            better="lower",
            note=f"until all {SOCKETS} pages show saved state, {CONCURRENCY} connecting at once; median of "
            f"{len(out['reconnect'])} + {len(out['fresh'])} alternating rounds",
        ),
    ]
