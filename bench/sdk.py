"""sdk_step_http: milliseconds per step of an agent on the SDK (`run.tool` with a call that does nothing: plan,
dispatch, complete over HTTP, the replay bookkeeping, a heartbeat thread, an Idempotency-Key per write), beside
the same three requests sent by hand with httpx, one worker each side, interleaved rounds on agent runs.
The ratio is what the SDK costs on top of the protocol itself.
"""

from __future__ import annotations

import time
import uuid

from bench.core import Context, figure, record

STEPS_PER_RUN = 10
RUNS_PER_ROUND = 4  # per side and round
ROUNDS = 4


def _queue(org, agent_name: str, n: int) -> None:
    from tasks.services import task_create

    for i in range(n):
        task_create(org=org, actor="bench", title=f"sdk bench {i}", agent=agent_name, input={"prompt": "bench"})


def _sdk_side(url: str, token: str, agent_name: str):
    from recovery_console import Console, execute

    def agent(run):
        for n in range(STEPS_PER_RUN):
            run.tool("noop", {"n": n}, lambda: {})
        return "done"

    def work(deadline: float) -> int:
        steps = 0
        with Console(url, token) as console:
            for _ in range(RUNS_PER_ROUND):
                if time.monotonic() >= deadline:
                    break
                claim = console.claim("bench-sdk", agents=[agent_name])
                if claim is None:
                    break
                if execute(console, claim, agent) != "succeeded":
                    raise RuntimeError(f"run {claim['run']} did not succeed on the SDK")
                steps += STEPS_PER_RUN
        return steps

    return work


def _raw_side(url: str, token: str, agent_name: str):
    import httpx

    def work(deadline: float) -> int:
        steps = 0
        with httpx.Client(base_url=url, headers={"Authorization": f"Token {token}"}, timeout=30) as client:

            def post(path, body):
                response = client.post(path, json=body, headers={"Idempotency-Key": uuid.uuid4().hex})
                if response.status_code >= 300 and response.status_code != 204:
                    raise RuntimeError(f"POST {path} answered {response.status_code}: {response.text[:200]}")
                return response

            for _ in range(RUNS_PER_ROUND):
                if time.monotonic() >= deadline:
                    break
                claim = post("/api/runner/claim/", {"worker": "bench-raw", "agents": [agent_name]})
                if claim.status_code == 204:
                    break
                run = claim.json()
                rid, epoch = run["run"], run["lease_epoch"]
                for seq in range(1, STEPS_PER_RUN + 1):
                    post(
                        f"/api/runner/runs/{rid}/steps/",
                        {"epoch": epoch, "seq": seq, "tool": "noop", "args": {"n": seq}},
                    )
                    post(f"/api/runner/runs/{rid}/steps/{seq}/dispatch/", {"epoch": epoch})
                    post(f"/api/runner/runs/{rid}/steps/{seq}/complete/", {"epoch": epoch, "ok": True, "result": {}})
                    steps += 1
                post(f"/api/runner/runs/{rid}/finish/", {"epoch": epoch, "status": "succeeded", "output": "done"})
        return steps

    return work


@figure("sdk_step_http", budget=90, order=71)
def sdk_steps(ctx: Context):
    from django.db import connection

    from bench.core import BENCH_DIR
    from bench.fixtures import org_with_people, worker_token
    from tasks.accounts import agent_add
    from tests.processes import Server

    org, _agent, _, worker = org_with_people("bench-sdk")
    agent_add(org=org, name="bench-sdk-agent")
    agent_add(org=org, name="bench-raw-agent")
    _queue(org, "bench-sdk-agent", RUNS_PER_ROUND * ROUNDS)
    _queue(org, "bench-raw-agent", RUNS_PER_ROUND * ROUNDS)
    token = worker_token(worker)
    connection.close()
    server = Server(log=BENCH_DIR / "daphne-sdk.log").start()
    totals = {"sdk": [0, 0.0], "raw": [0, 0.0]}
    try:
        sides = {
            "sdk": _sdk_side(server.url, token, "bench-sdk-agent"),
            "raw": _raw_side(server.url, token, "bench-raw-agent"),
        }
        for i in range(ROUNDS):
            for side in ("sdk", "raw") if i % 2 == 0 else ("raw", "sdk"):
                share = ctx.left() / max(1, 2 * (ROUNDS - i)) - 1
                started = time.perf_counter()
                steps = sides[side](time.monotonic() + max(1, share))
                totals[side][0] += steps
                totals[side][1] += time.perf_counter() - started
    finally:
        server.stop()

    def per_step(side: str) -> float | None:
        steps, seconds = totals[side]
        return seconds * 1000 / steps if steps else None

    return [
        record(
            "sdk_step_http",
            value=per_step("sdk"),
            unit="ms/step",
            baseline="the same three requests per step by hand (httpx)",
            baseline_value=per_step("raw"),
            target_ratio=1.25,
            better="lower",
            note=f"one worker per side, runs of {STEPS_PER_RUN} steps, {ROUNDS} interleaved rounds; "
            f"{totals['sdk'][0]} steps on the SDK, {totals['raw'][0]} by hand (claim and finish included)",
        )
    ]
