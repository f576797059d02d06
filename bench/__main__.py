"""`make bench`: how the recovery engine and the board scale. Reports only; never fails on speed.

    python -m bench              # everything
    python -m bench classify     # classify_50k only
    python -m bench board        # board_100k only
    python -m bench sockets      # live-update fan-out to 200 websockets (bench/sockets.py)
    python -m bench bulk         # one bulk operation over 5,000 tasks vs 1,000 (bench/bulk.py)

Database: a throwaway SQLite file `var/bench/bench.sqlite3`, recreated on every
run. With `DATABASE_URL=postgres://…` a database `bench_console` is created on
that server (dropped first if it exists, and dropped again at the end; set
BENCH_KEEP_DB=1 to keep it). Results: a table on stdout and `var/bench/results.json`.

Each measurement is bounded by BENCH_TIME_LIMIT seconds (default 30) per call:
a call that takes longer is interrupted and reported as `timeout`, so a
super-linear path shows up as a number instead of a hang.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import signal
import statistics
import sys
import time
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

BASE_DIR = Path(__file__).resolve().parent.parent
BENCH_DIR = BASE_DIR / "var" / "bench"
WORKSPACES = BENCH_DIR / f"workspaces-{os.getpid()}"
BENCH_DB_NAME = "bench_console"
TIME_LIMIT = float(os.environ.get("BENCH_TIME_LIMIT", "30"))

CLASSIFY_STEPS = 50_000
CLASSIFY_REPS = 5
BOARD_TASKS = 100_000
BOARD_REPS = 20


# --- environment and database ------------------------------------------------------


def _configure_environment() -> str | None:
    """Point the settings at a throwaway database before Django loads them. Returns the server URL (PG)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    os.environ.setdefault("SECRET_KEY", "bench-only-secret-key-" + "0123456789abcdef" * 3)
    os.environ.setdefault("DEBUG", "0")
    os.environ.setdefault("CONSOLE_HTTPS", "0")  # the test client speaks plain http
    os.environ.setdefault("CONSOLE_WORKSPACES", str(WORKSPACES))
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    server_url = os.environ.get("DATABASE_URL", "")
    if server_url.startswith(("postgres://", "postgresql://")):
        parts = urlsplit(server_url)
        os.environ["DATABASE_URL"] = urlunsplit(parts._replace(path="/" + BENCH_DB_NAME))
        _pg_admin(server_url, f"DROP DATABASE IF EXISTS {BENCH_DB_NAME}", f"CREATE DATABASE {BENCH_DB_NAME}")
        return server_url
    if server_url:
        raise SystemExit(f"bench: unsupported DATABASE_URL {server_url.split(':', 1)[0]}://… (SQLite or PostgreSQL)")
    db = BENCH_DIR / "bench.sqlite3"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    os.environ["DATABASE_URL"] = f"sqlite:///{db}"
    return None


def _pg_admin(server_url: str, *statements: str) -> None:
    import psycopg

    with psycopg.connect(server_url, autocommit=True) as conn:
        for sql in statements:
            conn.execute(sql)


# --- timing ------------------------------------------------------------------------


class Timeout(Exception):
    pass


@contextmanager
def time_limit(seconds: float):
    """Interrupt the block after `seconds` (SIGALRM; the main thread only)."""

    def expire(signum, frame):
        raise Timeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


RESULTS: list[dict] = []


def measure(name: str, fn, *, reps: int, note: str = "", count_queries: bool = True) -> dict:
    """Call `fn` `reps` times; record median, p95 and total wall time, and the queries of one call."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    times: list[float] = []
    queries = None
    status = "ok"
    for i in range(reps):
        try:
            with time_limit(TIME_LIMIT):
                if i == 0 and count_queries:
                    with CaptureQueriesContext(connection) as ctx:
                        start = time.perf_counter()
                        fn()
                        times.append(time.perf_counter() - start)
                    queries = len(ctx.captured_queries)
                else:
                    start = time.perf_counter()
                    fn()
                    times.append(time.perf_counter() - start)
        except Timeout:
            status = f"timeout after {TIME_LIMIT:g} s (rep {i + 1} of {reps})"
            break
    ordered = sorted(times)
    row = {
        "name": name,
        "n": len(times),
        "median_ms": statistics.median(ordered) * 1000 if ordered else None,
        "p95_ms": ordered[max(0, -(-len(ordered) * 95 // 100) - 1)] * 1000 if ordered else None,
        "total_ms": sum(ordered) * 1000,
        "queries": queries,
        "status": status,
        "note": note,
    }
    RESULTS.append(row)
    _print_row(row)
    return row


def _ms(value) -> str:
    return "-" if value is None else f"{value:,.1f}"


HEADER = f"{'name':<44} {'n':>3} {'median ms':>11} {'p95 ms':>11} {'total ms':>11} {'queries':>7}  status"


def _print_row(row: dict) -> None:
    q = "-" if row["queries"] is None else str(row["queries"])
    print(
        f"{row['name']:<44} {row['n']:>3} {_ms(row['median_ms']):>11} {_ms(row['p95_ms']):>11} "
        f"{_ms(row['total_ms']):>11} {q:>7}  {row['status']}{'  ' + row['note'] if row['note'] else ''}",
        flush=True,
    )


def _section(title: str) -> None:
    print(f"\n== {title}\n{HEADER}", flush=True)


def _setup_note(what: str, seconds: float) -> None:
    print(f"   (setup: {what} in {seconds:.1f} s)", flush=True)


# --- fixtures ----------------------------------------------------------------------

TOOLS = [("file_read", "replay"), ("file_write", "notify"), ("sleep", "replay"), ("custom_tool", "forget")]


def _org_and_people():
    from tasks.accounts import agent_add, member_add, org_create
    from tasks.models import Agent

    org, _ = org_create(slug="bench", name="Bench")
    member_add(org=org, username="bench-operator", role="operator", password="bench-password-1234")
    member_add(org=org, username="bench-admin", role="admin", password="bench-password-1234")
    agent_add(org=org, name="builder")
    from django.contrib.auth import get_user_model

    users = get_user_model().objects
    return org, Agent.objects.get(org=org, name="builder"), users.get(username="bench-operator")


def _step_shape(seq: int, n: int) -> dict:
    """Step `seq` of an n-step interrupted run: completed (some reused, some failed), the last a dispatched write."""
    tool, mode = TOOLS[seq % len(TOOLS)]
    if seq == n:
        return {"tool": "file_write", "mode": "notify", "phase": "dispatched", "reused": False}
    if seq % 997 == 0:
        return {"tool": tool, "mode": mode, "phase": "failed", "reused": False}
    return {"tool": tool, "mode": mode, "phase": "completed", "reused": seq % 3 == 0}


def _facts(n: int):
    from recovery.classify import RunFacts, StepFacts

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    steps = []
    plan = []
    for seq in range(1, n + 1):
        shape = _step_shape(seq, n)
        plan.append({"tool": shape["tool"], "args": {"n": seq}})
        done = shape["phase"] in ("completed", "failed")
        steps.append(
            StepFacts(
                seq=seq,
                tool=shape["tool"],
                args={"n": seq},
                phase=shape["phase"],
                recovery_mode=shape["mode"],
                has_result=shape["phase"] == "completed",
                dispatched_at=t0 + timedelta(seconds=2 * seq),
                completed_at=t0 + timedelta(seconds=2 * seq + 1) if done else None,
                reused=shape["reused"],
                error="tool failed" if shape["phase"] == "failed" else "",
            )
        )
    return RunFacts(run_id=1, status="interrupted", plan={"steps": plan}, steps=tuple(steps))


def _extrapolate(row: dict, ladder: dict[int, float | None]) -> None:
    """For a timed-out 50k row: the growth exponent fitted over the smaller sizes (log-log least
    squares) and the time per call it predicts at 50k."""
    if row["n"] or not all(ladder.values()):
        return
    xs = [math.log(n) for n in ladder]
    ys = [math.log(ms) for ms in ladder.values()]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    exponent = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    biggest = max(ladder)
    estimate_s = ladder[biggest] * (CLASSIFY_STEPS / biggest) ** exponent / 1000
    row["growth_exponent"] = round(exponent, 2)
    row["estimated_ms"] = round(estimate_s * 1000)
    print(
        f"   classify grows ~n^{exponent:.2f} over {min(ladder):,}-{biggest:,} steps: "
        f"{CLASSIFY_STEPS:,} steps would take ~{estimate_s:,.0f} s per call",
        flush=True,
    )


# --- classify_50k -------------------------------------------------------------------


def bench_classify() -> None:
    from django.db import transaction

    from recovery.classify import classify
    from recovery.selectors import diagnose, run_facts
    from tasks.models import Run, RunStatus, Step, Task

    _section(f"classify_50k: classify() of a pure {CLASSIFY_STEPS:,}-step RunFacts, and diagnose() of a stored run")
    # Smaller sizes first: they show how the cost grows with the number of steps.
    ladder = {}
    for n in (1_000, 2_000, 4_000, 8_000):
        facts = _facts(n)
        row = measure(f"classify pure {n:,} steps", lambda facts=facts: classify(facts), reps=3, count_queries=False)
        ladder[n] = row["median_ms"]
    facts = _facts(CLASSIFY_STEPS)
    disposition = classify(_facts(2_000)).disposition  # the same shape, small enough to be quick
    row = measure(
        f"classify pure {CLASSIFY_STEPS:,} steps",
        lambda: classify(facts),
        reps=CLASSIFY_REPS,
        count_queries=False,
        note=f"disposition of the shape: {disposition}",
    )
    _extrapolate(row, ladder)

    org, agent, _ = _org_and_people()
    start = time.perf_counter()
    tools = [_step_shape(seq, CLASSIFY_STEPS)["tool"] for seq in range(1, CLASSIFY_STEPS + 1)]
    plan = {"steps": [{"tool": tool, "args": {"n": seq}} for seq, tool in enumerate(tools, start=1)]}
    task = Task.objects.create(org=org, title="bench: a 50,000-step run", agent=agent, status="blocked")
    now = datetime.now(UTC)
    run = Run.objects.create(
        org=org,
        task=task,
        agent=agent,
        status=RunStatus.INTERRUPTED,
        input=plan,
        lease_owner="bench/w",
        lease_epoch=1,
        error_code="lease_lapsed",
        started_at=now - timedelta(days=1),
        finished_at=now,
    )
    t0 = now - timedelta(days=1)
    rows = []
    for seq in range(1, CLASSIFY_STEPS + 1):
        shape = _step_shape(seq, CLASSIFY_STEPS)
        done = shape["phase"] in ("completed", "failed")
        rows.append(
            Step(
                run=run,
                seq=seq,
                tool=shape["tool"],
                args={"n": seq},
                recovery_mode=shape["mode"],
                phase=shape["phase"],
                result={"ok": seq} if shape["phase"] == "completed" else None,
                error="tool failed" if shape["phase"] == "failed" else "",
                usage=1 if done else 0,
                dispatch_epoch=1,
                planned_at=t0 + timedelta(seconds=seq),
                dispatched_at=t0 + timedelta(seconds=seq, milliseconds=300),
                completed_at=t0 + timedelta(seconds=seq, milliseconds=600) if done else None,
            )
        )
    with transaction.atomic():
        Step.objects.bulk_create(rows, batch_size=2_000)
    _setup_note(f"{CLASSIFY_STEPS:,} Step rows bulk-created", time.perf_counter() - start)
    run = Run.objects.get(pk=run.pk)

    measure(f"run_facts (read only) {CLASSIFY_STEPS:,}-step run", lambda: run_facts(run), reps=CLASSIFY_REPS)
    row = measure(
        f"diagnose (read + classify) {CLASSIFY_STEPS:,}-step run",
        lambda: diagnose(run),
        reps=CLASSIFY_REPS,
        note=f"disposition of the shape: {disposition}",
    )
    _extrapolate(row, ladder)


# --- board_100k ---------------------------------------------------------------------

# (share of tasks, task status, paused, run status, action status or None)
BOARD_MIX = [
    (50, "done", False, "succeeded", None),
    (12, "in_progress", False, "running", None),
    (10, "in_progress", False, "queued", None),
    (8, "blocked", False, "interrupted", "open"),  # needs_decision
    (3, "blocked", False, "interrupted", "exhausted"),  # exhausted
    (7, "blocked", False, "stopped", None),  # blocked
    (4, "in_progress", True, "queued", None),  # blocked (paused)
    (6, "cancelled", False, "cancelled", None),
]
SEARCH_WORD = "invoice"  # in 1 title of 100


def _seed_board(org, agent, operator) -> None:
    from django.db import transaction

    start = time.perf_counter()
    shapes = [shape for share, *shape in BOARD_MIX for _ in range(share)]
    now = datetime.now(UTC)
    batch = 5_000
    for first in range(0, BOARD_TASKS, batch):
        with transaction.atomic():
            _seed_batch(org, agent, operator, shapes, now, range(first, min(first + batch, BOARD_TASKS)))
    _setup_note(f"{BOARD_TASKS:,} tasks with one run each (+ actions) bulk-created", time.perf_counter() - start)


def _seed_batch(org, agent, operator, shapes, now, idx: range) -> None:
    from recovery.models import RecoveryAction
    from tasks.models import Run, Task

    tasks = [
        Task(
            org=org,
            title=f"{'export ' + SEARCH_WORD if i % 100 == 7 else 'task'} {i} for the bench",
            agent=agent,
            creator=operator,
            status=shapes[i % len(shapes)][0],
            paused=shapes[i % len(shapes)][1],
            private=i % 50 == 3,
        )
        for i in idx
    ]
    tasks = Task.objects.bulk_create(tasks)
    runs = []
    for i, task in zip(idx, tasks, strict=True):
        run_status = shapes[i % len(shapes)][2]
        leased = run_status == "running"
        runs.append(
            Run(
                org=org,
                task=task,
                agent=agent,
                status=run_status,
                input={"steps": [{"tool": "sleep", "args": {"seconds": 0}}]},
                lease_owner="" if run_status == "queued" else "bench/w",
                lease_epoch=0 if run_status == "queued" else 1,
                lease_expires_at=now + timedelta(hours=1) if leased else None,
                started_at=None if run_status == "queued" else now,
                finished_at=None if run_status in ("queued", "running") else now,
                error_code="lease_lapsed" if run_status == "interrupted" else "",
            )
        )
    runs = Run.objects.bulk_create(runs)
    actions = []
    for i, task, run in zip(idx, tasks, runs, strict=True):
        action_status = shapes[i % len(shapes)][3]
        if action_status:
            actions.append(
                RecoveryAction(
                    org=org,
                    task=task,
                    run=run,
                    kind="unknown_outcome" if action_status == "open" else "continuation",
                    status=action_status,
                    cause="unknown_outcome" if action_status == "open" else "interrupted_twice",
                    evidence={"seq": 1, "tool": "file_write"},
                    seq=1,
                    original_owner=agent,
                    recovery_owner="role:operator" if action_status == "open" else "role:admin",
                    attempts=0 if action_status == "open" else 2,
                    max_attempts=2,
                    due_at=now + timedelta(days=1),
                )
            )
    RecoveryAction.objects.bulk_create(actions)


def bench_board() -> None:
    from django.conf import settings
    from django.test import Client

    from recovery.selectors import task_page

    _section(f"board_100k: task_page() over {BOARD_TASKS:,} tasks of one organization, limit 50")
    org, agent, operator = _org_and_people()
    _seed_board(org, agent, operator)
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    user = type(operator).objects.get(pk=operator.pk)

    for state in ("all", "running", "needs_decision", "blocked", "exhausted"):
        found = len(task_page(user, state=state, limit=50)[0])
        measure(
            f"task_page state={state}",
            lambda s=state: task_page(user, state=s, limit=50),
            reps=BOARD_REPS,
            note=f"{found} rows",
        )
    _, cursor = task_page(user, state="all", limit=50)
    measure(
        "task_page state=all, second page (cursor)",
        lambda: task_page(user, state="all", cursor=cursor, limit=50),
        reps=BOARD_REPS,
        note=f"cursor={cursor}",
    )
    found = len(task_page(user, state="all", q=SEARCH_WORD, limit=50)[0])
    measure(
        f"task_page q={SEARCH_WORD!r}",
        lambda: task_page(user, state="all", q=SEARCH_WORD, limit=50),
        reps=BOARD_REPS,
        note=f"{found} rows",
    )

    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    client = Client()
    client.force_login(user)
    for path in ("/", "/?state=needs_decision", f"/?q={SEARCH_WORD}"):
        response = client.get(path)
        if response.status_code != 200:
            RESULTS.append({"name": f"GET {path}", "n": 0, "status": f"HTTP {response.status_code}"})
            print(f"{'GET ' + path:<44}   -           -           -           -        -  HTTP {response.status_code}")
            continue
        size = len(response.content)
        measure(f"GET {path} (board page)", lambda p=path: client.get(p), reps=BOARD_REPS, note=f"{size:,} bytes")


# --- main ---------------------------------------------------------------------------


def bench_sockets() -> None:
    """Live-update fan-out to 200 websockets: see bench/sockets.py."""
    from bench import sockets

    sockets.main([])


def bench_bulk() -> None:
    """One bulk operation over 5,000 tasks vs 1,000: queries per batch and peak memory (bench/bulk.py)."""
    from bench import bulk

    _section("bulk_5k: preview and execute one bulk operation over 5,000 tasks, and over 1,000")
    RESULTS.extend(bulk.run())


BENCHES = {"classify": bench_classify, "board": bench_board, "sockets": bench_sockets, "bulk": bench_bulk}


def main(argv: list[str]) -> int:
    names = argv or list(BENCHES)
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        print(f"usage: python -m bench [{'|'.join(BENCHES)}] ...  (unknown: {', '.join(unknown)})", file=sys.stderr)
        return 2
    server_url = _configure_environment()
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection, connections

    started = time.perf_counter()
    try:
        t = time.perf_counter()
        call_command("migrate", verbosity=0)
        print(
            f"bench: {connection.vendor} database {connection.settings_dict['NAME']}, "
            f"migrated in {time.perf_counter() - t:.1f} s; time limit {TIME_LIMIT:g} s per call",
            flush=True,
        )
        for name in names:
            BENCHES[name]()
    finally:
        connections.close_all()
        if server_url and os.environ.get("BENCH_KEEP_DB") != "1":
            _pg_admin(server_url, f"DROP DATABASE IF EXISTS {BENCH_DB_NAME}")
        shutil.rmtree(WORKSPACES, ignore_errors=True)
    elapsed = time.perf_counter() - started
    out = BENCH_DIR / "results.json"
    out.write_text(
        json.dumps(
            {
                "at": datetime.now(UTC).isoformat(),
                "database": connection.vendor,
                "python": platform.python_version(),
                "django": django.get_version(),
                "time_limit_s": TIME_LIMIT,
                "elapsed_s": round(elapsed, 1),
                "benches": names,
                "results": RESULTS,
            },
            indent=2,
        )
    )
    print(f"\nbench: done in {elapsed:.0f} s; results in {out.relative_to(BASE_DIR)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
