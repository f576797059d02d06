"""claims_vs_procrastinate: claims per second by 16 threads over 10,000 queued runs (through
`run_claim`, the service behind the runner API's claim), beside procrastinate's own fetch
(`procrastinate_fetch_job_v2`, the SQL its workers call) by 16 threads over 10,000 queued jobs in the same
database, interleaved round by round. Every claim is checked for duplicates.

procrastinate is a bench-only extra (`pip install .[bench]`): the product never imports it. It needs
PostgreSQL; on SQLite the baseline is not run and the table says so.
"""

from __future__ import annotations

import threading
import time

from bench.core import Context, figure, record

THREADS = 16
QUEUED = 10_000
ROUNDS = 4  # per side, alternating
PER_ROUND = 1_500  # claims per round: 4 rounds claim 6,000 of the 10,000 (the queue thins out as in real life)


def _race(n_threads: int, quota: int, setup, claim_one, teardown, deadline: float) -> tuple[int, float, list]:
    """`n_threads` threads claim until `quota` claims are made (or the deadline); returns (claims, seconds, ids)."""
    lock = threading.Lock()
    state = {"made": 0}
    ids: list = []
    barrier = threading.Barrier(n_threads + 1)
    errors: list[BaseException] = []

    def work(i: int) -> None:
        handle = setup(i)
        try:
            barrier.wait()
            while time.monotonic() < deadline:
                with lock:
                    if state["made"] >= quota:
                        break
                    state["made"] += 1
                got = claim_one(handle, i)
                if got is None:
                    with lock:
                        state["made"] -= 1
                    break
                ids.append(got)
        except BaseException as exc:  # reported by the caller
            errors.append(exc)
            try:
                barrier.abort()
            except threading.BrokenBarrierError:
                pass
        finally:
            teardown(handle)

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(n_threads)]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return len(ids), elapsed, ids


# --- ours -----------------------------------------------------------------------------------


def _ours(worker):
    from django.db import connections

    from tasks.services import run_claim

    def setup(i):
        return None

    def claim_one(_, i):
        run = run_claim(worker=worker, label=f"bench-{i}")
        return run.pk if run is not None else None

    def teardown(_):
        connections.close_all()

    return setup, claim_one, teardown


# --- procrastinate ------------------------------------------------------------------------------


def _dsn() -> str:
    from django.db import connection

    sd = connection.settings_dict
    parts = {"dbname": sd["NAME"], "user": sd.get("USER"), "password": sd.get("PASSWORD")}
    parts |= {"host": sd.get("HOST") or "127.0.0.1", "port": sd.get("PORT") or 5432}
    return " ".join(f"{k}={v}" for k, v in parts.items() if v)


def _procrastinate_setup(n: int) -> None:
    import psycopg
    from procrastinate.schema import SchemaManager

    with psycopg.connect(_dsn(), autocommit=True) as conn:
        conn.execute(SchemaManager.get_schema())
        conn.execute(
            "INSERT INTO procrastinate_jobs (queue_name, task_name, args) "
            "SELECT 'default', 'bench.noop', jsonb_build_object('n', g) FROM generate_series(1, %s) AS g",
            (n,),
        )
        conn.execute("ANALYZE procrastinate_jobs")


def _procrastinate():
    import psycopg
    from procrastinate.sql import queries

    fetch = queries["fetch_job"]
    register = queries["register_worker"]

    def setup(i):
        conn = psycopg.connect(_dsn(), autocommit=True)
        worker_id = conn.execute(register).fetchone()[0]
        return conn, worker_id

    def claim_one(handle, i):
        conn, worker_id = handle
        row = conn.execute(fetch, {"queues": None, "worker_id": worker_id}).fetchone()
        return row[0] if row and row[0] is not None else None

    def teardown(handle):
        if handle:
            handle[0].close()

    return setup, claim_one, teardown


def _version() -> str:
    from importlib.metadata import version

    return version("procrastinate")


@figure("claims_vs_procrastinate", budget=120, order=30)
def claims(ctx: Context):
    from django.db import connection

    from bench.fixtures import org_with_people, queue_tasks, vacuum_analyze
    from tasks.models import Run

    org, agent, _, worker = org_with_people("bench-claims")
    queue_tasks(org, agent, QUEUED)
    peer = ctx.postgres
    if peer:
        _procrastinate_setup(QUEUED)
    vacuum_analyze()
    connection.close()  # the threads open their own

    ours_side, peer_side = _ours(worker), _procrastinate() if peer else None
    totals = {"ours": [0, 0.0], "peer": [0, 0.0]}
    claimed: list[int] = []
    for i in range(ROUNDS):
        order = ("ours", "peer") if i % 2 == 0 else ("peer", "ours")
        for side in order:
            if side == "peer" and not peer:
                continue
            per_side_left = ctx.left() / max(1, 2 * (ROUNDS - i))
            funcs = ours_side if side == "ours" else peer_side
            made, seconds, ids = _race(THREADS, PER_ROUND, *funcs, deadline=time.monotonic() + per_side_left)
            totals[side][0] += made
            totals[side][1] += seconds
            if side == "ours":
                claimed += ids
    duplicates = len(claimed) - len(set(claimed))
    running = Run.objects.filter(org=org, status="running").count()
    rate = totals["ours"][0] / totals["ours"][1] if totals["ours"][1] else None
    peer_rate = totals["peer"][0] / totals["peer"][1] if peer and totals["peer"][1] else None
    if duplicates or running != len(claimed):
        raise RuntimeError(f"{duplicates} duplicate claims; {running} runs running for {len(claimed)} claims")
    note = (
        f"{THREADS} threads, {ROUNDS} interleaved rounds of up to {PER_ROUND:,} claims over {QUEUED:,} queued; "
        f"{len(claimed):,} claims, 0 duplicates"
    )
    return [
        record(
            "claims_vs_procrastinate",
            value=rate,
            unit="claims/s",
            baseline=f"procrastinate {_version()} fetch_job, {THREADS} threads, {QUEUED:,} jobs"
            if peer
            else "procrastinate fetch_job (needs PostgreSQL: not run on SQLite)",
            baseline_value=peer_rate,
            target_ratio=1.0,
            better="higher",
            note=note,
        )
    ]
