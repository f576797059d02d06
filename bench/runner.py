"""runner_http_vs_inprocess: steps checkpointed per second by 4 workers through the runner API over HTTP
(a daphne on the bench database, each worker with its own connection and an Idempotency-Key on every
write, as the reference worker sends), beside 4 threads calling the same services in-process, interleaved.
A report: the HTTP side carries authentication, parsing and idempotency that the in-process side does not.
"""

from __future__ import annotations

import threading
import time
import uuid

from bench.core import Context, figure, record

WORKERS = 4
STEPS_PER_RUN = 10
RUNS_PER_ROUND = 40  # per side and round (400 steps)
ROUNDS = 3


def _plan():
    return {"steps": [{"tool": "sleep", "args": {"seconds": 0, "n": i}} for i in range(STEPS_PER_RUN)]}


def _threads(work, deadline: float) -> tuple[int, float]:
    counts = [0] * WORKERS
    errors: list[BaseException] = []
    barrier = threading.Barrier(WORKERS + 1)

    def body(i):
        try:
            barrier.wait()
            counts[i] = work(i, deadline)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(WORKERS)]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return sum(counts), time.perf_counter() - start


def _http_worker(url: str, token: str, label: str):
    import httpx

    def work(i: int, deadline: float) -> int:
        steps, runs = 0, 0
        headers = {"Authorization": f"Token {token}"}
        with httpx.Client(base_url=url, headers=headers, timeout=30) as client:

            def post(path, body):
                response = client.post(path, json=body, headers={"Idempotency-Key": uuid.uuid4().hex})
                if response.status_code >= 300 and response.status_code != 204:
                    raise RuntimeError(f"POST {path} answered {response.status_code}: {response.text[:200]}")
                return response

            while time.monotonic() < deadline and runs < RUNS_PER_ROUND // WORKERS:
                runs += 1
                claim = post("/api/runner/claim/", {"worker": f"{label}-{i}"})
                if claim.status_code == 204:
                    break
                run = claim.json()
                rid, epoch = run["run"], run["lease_epoch"]
                for seq, call in enumerate(run["input"]["steps"], start=1):
                    post(f"/api/runner/runs/{rid}/steps/", {"epoch": epoch, "seq": seq, **call})
                    post(f"/api/runner/runs/{rid}/steps/{seq}/dispatch/", {"epoch": epoch})
                    post(f"/api/runner/runs/{rid}/steps/{seq}/complete/", {"epoch": epoch, "ok": True, "result": {}})
                    steps += 1
                post(f"/api/runner/runs/{rid}/finish/", {"epoch": epoch, "status": "succeeded"})
        return steps

    return work


def _inprocess_worker(worker, label: str):
    from django.db import connections

    from tasks import services

    def work(i: int, deadline: float) -> int:
        steps, runs = 0, 0
        try:
            while time.monotonic() < deadline and runs < RUNS_PER_ROUND // WORKERS:
                runs += 1
                run = services.run_claim(worker=worker, label=f"{label}-{i}")
                if run is None:
                    break
                w = {"worker": worker, "run_id": run.pk, "epoch": run.lease_epoch}
                for seq, call in enumerate(run.input["steps"], start=1):
                    services.step_plan(**w, seq=seq, tool=call["tool"], args=call["args"])
                    services.step_dispatch(**w, seq=seq)
                    services.step_complete(**w, seq=seq, ok=True, result={})
                    steps += 1
                services.run_finish(**w, status="succeeded")
        finally:
            connections.close_all()
        return steps

    return work


@figure("runner_http_vs_inprocess", budget=100, order=70)
def runner(ctx: Context):
    from django.db import connection

    from bench.core import BENCH_DIR
    from bench.fixtures import org_with_people, queue_tasks, worker_token
    from tests.processes import Server

    org_http, agent_http, _, worker_http = org_with_people("bench-runner-http")
    org_local, agent_local, _, worker_local = org_with_people("bench-runner-local")
    total = RUNS_PER_ROUND * ROUNDS
    queue_tasks(org_http, agent_http, total, plan=_plan())
    queue_tasks(org_local, agent_local, total, plan=_plan())
    token = worker_token(worker_http)
    connection.close()
    server = Server(log=BENCH_DIR / "daphne-runner.log").start()
    totals = {"http": [0, 0.0], "local": [0, 0.0]}
    try:
        http_work = _http_worker(server.url, token, "bench-http")
        local_work = _inprocess_worker(worker_local, "bench-local")
        # Each round: as many runs as the round allows, on each side; the queue of each side is its own.
        for i in range(ROUNDS):
            for side in ("http", "local") if i % 2 == 0 else ("local", "http"):
                share = ctx.left() / max(1, 2 * (ROUNDS - i)) - 1
                work = http_work if side == "http" else local_work
                steps, seconds = _threads(work, time.monotonic() + max(1, share))
                totals[side][0] += steps
                totals[side][1] += seconds
    finally:
        server.stop()
    http_rate = totals["http"][0] / totals["http"][1] if totals["http"][1] else None
    local_rate = totals["local"][0] / totals["local"][1] if totals["local"][1] else None
    return [
        record(
            "runner_http_vs_inprocess",
            value=http_rate,
            unit="steps/s",
            baseline=f"the same services in-process, {WORKERS} threads",
            baseline_value=local_rate,
            target_ratio=None,
            better="higher",
            note=f"{WORKERS} workers, runs of {STEPS_PER_RUN} steps (plan + dispatch + complete each), "
            f"{ROUNDS} interleaved rounds; {totals['http'][0]} steps over HTTP, {totals['local'][0]} in-process",
        )
    ]
