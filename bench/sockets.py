"""Live-update fan-out: from a committed change to its fragment on every open socket.

Starts a daphne on a throwaway SQLite file under var/bench (or on DATABASE_URL
when it is set), opens N websockets to one task page, commits pause/resume
toggles through the service, and measures, per socket, the time from the
commit returning to the fragment carrying that commit's event arriving. Beside
it, the bare InMemoryChannelLayer round trip measured in the same run.

    .venv/bin/python -m bench.sockets [--sockets 200] [--toggles 30]
    .venv/bin/python -m bench sockets      (the same, on `python -m bench`'s database)

Reports only: it never fails on speed.
"""

import argparse
import asyncio
import os
import random
import secrets
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / "var" / "bench"


def setup_django() -> Path | None:
    """Configure Django on the bench database; return the SQLite file to delete afterwards, if any."""
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    throwaway = None
    if not os.environ.get("DATABASE_URL"):
        throwaway = BENCH_DIR / f"sockets-{os.getpid()}.sqlite3"
        os.environ["DATABASE_URL"] = f"sqlite:///{throwaway}"
    os.environ.setdefault("SECRET_KEY", "bench-" + secrets.token_hex(32))
    os.environ.setdefault("CONSOLE_HTTPS", "0")
    os.environ.setdefault("CONSOLE_WORKSPACES", str(BENCH_DIR / f"sockets-workspaces-{os.getpid()}"))
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ["DJANGO_SETTINGS_MODULE"] = "console.settings"
    sys.path.insert(0, str(ROOT))

    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    return throwaway


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def line(label: str, samples: list[float]) -> str:
    ms = [s * 1000 for s in samples]
    return (
        f"{label:<46} p50 {percentile(ms, 50):8.2f} ms   p99 {percentile(ms, 99):8.2f} ms   "
        f"max {max(ms):8.2f} ms   (n={len(ms)})"
    )


# --- the bare channel layer ------------------------------------------------------------


async def channel_layer_round_trip(n: int = 2000) -> list[float]:
    from channels.layers import InMemoryChannelLayer

    layer = InMemoryChannelLayer()
    channel = await layer.new_channel()
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        await layer.send(channel, {"type": "bench.ping"})
        await layer.receive(channel)
        samples.append(time.perf_counter() - started)
    return samples


async def channel_layer_group_fanout(receivers: int, rounds: int = 30) -> list[float]:
    """group_send to `receivers` channels; the time until each of them has its message."""
    from channels.layers import InMemoryChannelLayer

    layer = InMemoryChannelLayer(capacity=1000)
    channels = [await layer.new_channel() for _ in range(receivers)]
    for channel in channels:
        await layer.group_add("bench", channel)
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()

        async def receive(channel, started=started):
            await layer.receive(channel)
            return time.perf_counter() - started

        waiting = [asyncio.ensure_future(receive(c)) for c in channels]
        await layer.group_send("bench", {"type": "bench.ping"})
        samples += await asyncio.gather(*waiting)
    return samples


# --- the live sockets --------------------------------------------------------------------


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


def make_fixture():
    """An organization, an operator with a session, and a task with a queued run."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    from tasks.accounts import agent_add, member_add, org_create
    from tasks.services import task_create

    slug = f"bench-{secrets.token_hex(4)}"
    org, _ = org_create(slug=slug, name="Bench")
    member_add(org=org, username=slug, role="operator", password=secrets.token_hex(12))
    agent_add(org=org, name="builder")
    task = task_create(
        org=org, actor="bench", title="fan-out", agent="builder", input={"steps": [{"tool": "sleep", "args": {}}]}
    )
    user = get_user_model().objects.get(username=slug)
    client = Client()
    client.force_login(user)
    return org, user, task, client.cookies["sessionid"].value


def current_cursor() -> int:
    from django.db import connections

    from console.live import last_event_id

    try:
        return last_event_id()
    finally:
        connections.close_all()  # this worker thread's connection; a DROP DATABASE afterwards must not wait


def toggle(task_id: int, user) -> tuple[float, int]:
    """Pause or resume (whichever changes something); return when it committed and the id of its event."""
    from django.db import connections

    from console.live import last_event_id
    from tasks.models import Task
    from tasks.services import task_pause, task_resume

    try:
        task = Task.objects.get(pk=task_id)
        (task_resume if task.paused else task_pause)(actor=user, task=task)
        committed = time.perf_counter()
        return committed, last_event_id()
    finally:
        connections.close_all()


async def run_sockets(server, task_id: int, user, session: str, n_sockets: int, toggles: int) -> dict:
    from tests.live.wsclient import WebSocket

    url = f"ws://127.0.0.1:{server.port}/ws/tasks/{task_id}/"
    gate = asyncio.Semaphore(50)

    async def open_one():
        async with gate:
            return await WebSocket.connect(url, origin=server.url, cookie=f"sessionid={session}", timeout=60)

    cursor = await asyncio.to_thread(current_cursor)
    started = time.perf_counter()
    sockets = await asyncio.gather(*(open_one() for _ in range(n_sockets)))
    probes = [Probe(ws) for ws in sockets]
    # What a page sends on open: its cursor is current, so the server has nothing to resend.
    for probe in probes:
        await probe.ws.send_json({"type": "resync", "last_event": cursor, "reconnect": False})
    connect_seconds = time.perf_counter() - started

    latencies, per_commit, commit_seconds = [], [], []
    try:
        # An unmeasured first commit: every socket receiving it proves every subscription is in place.
        for k in range(toggles + 1):
            # Commit at a random moment relative to the relay's poll, not in step with it.
            await asyncio.sleep(random.uniform(0, 0.5))
            before = time.perf_counter()
            committed, event_id = await asyncio.to_thread(toggle, task_id, user)
            commit_seconds.append(committed - before)
            needle = f'data-last-event="{event_id}"'
            try:
                arrivals = await asyncio.wait_for(asyncio.gather(*(p.first(needle) for p in probes)), 60)
            except TimeoutError:
                got = sum(any(needle in m for _, m in p.inbox) for p in probes)
                closed = sum(p.ws.close_code is not None for p in probes)
                raise RuntimeError(
                    f"commit {k} (event {event_id}) reached {got} of {len(probes)} sockets within 60 s "
                    f"({closed} closed); see {server.log}"
                ) from None
            if k == 0:
                continue
            latencies += [t - committed for t in arrivals]
            per_commit.append(max(arrivals) - committed)
    finally:
        for probe in probes:
            await probe.ws.close()
            probe.pump.cancel()
        await asyncio.gather(*(p.pump for p in probes), return_exceptions=True)
    return {
        "latencies": latencies,
        "last_socket": per_commit,
        "commit": commit_seconds,
        "connect_seconds": connect_seconds,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sockets", description=__doc__.splitlines()[0])
    parser.add_argument("--sockets", type=int, default=200)
    parser.add_argument("--toggles", type=int, default=30)
    args = parser.parse_args(argv)

    throwaway = setup_django()
    from django.db import connection

    from tests.processes import Server

    vendor = connection.vendor
    org, user, task, session = make_fixture()
    server = Server(log=BENCH_DIR / "daphne-sockets.log").start()
    try:
        result = asyncio.run(run_sockets(server, task.pk, user, session, args.sockets, args.toggles))
        bare = asyncio.run(channel_layer_round_trip())
        fanout = asyncio.run(channel_layer_group_fanout(args.sockets))
    finally:
        server.stop()
        shutil.rmtree(task.workspace, ignore_errors=True)
        if Path(os.environ["CONSOLE_WORKSPACES"]).name == f"sockets-workspaces-{os.getpid()}":
            shutil.rmtree(os.environ["CONSOLE_WORKSPACES"], ignore_errors=True)
        if throwaway is not None:
            connection.close()
            for suffix in ("", "-wal", "-shm"):
                Path(f"{throwaway}{suffix}").unlink(missing_ok=True)

    poll = "LISTEN/NOTIFY + 2 s poll" if vendor == "postgresql" else "0.3 s poll"
    print(f"live sockets: {args.sockets} sockets on one task page, {args.toggles} commits, {vendor} ({poll})")
    print(f"  {args.sockets} sockets opened and resynced (as a page does) in {result['connect_seconds']:.2f} s")
    print("  " + line("commit → fragment, every socket", result["latencies"]))
    print("  " + line(f"commit → fragment on all {args.sockets} sockets", result["last_socket"]))
    print("  " + line("the service call itself, to its commit", result["commit"]))
    print("  " + line("InMemoryChannelLayer send → receive", bare))
    print("  " + line(f"InMemoryChannelLayer group_send → {args.sockets} receive", fanout))
    print(f"  mean commit → fragment {statistics.mean(result['latencies']) * 1000:.1f} ms")
    if throwaway is None:
        print(f"  (organization {org.slug!r} stays in database {connection.settings_dict['NAME']!r})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
