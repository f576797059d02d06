"""The agent's path through the SDK against a real daphne (PostgreSQL or SQLite behind it):

- `sdk_step_vs_bare_roundtrips`: milliseconds per tool step of an agent on the SDK (`run.tool` with a call that
  does nothing: its plan, dispatch and completion over HTTP, each with an Idempotency-Key, the replay
  bookkeeping, a heartbeat thread), beside three round trips to a no-op view of the same server (`GET /healthz`:
  no authentication, one `SELECT 1`; an existing view rather than a no-op endpoint made for the bench), interleaved,
  medians of each side. The ratio is what a step costs an
  agent developer over the floor of three round trips.
- `sdk_turn_calls_per_step`: HTTP calls per step of a model turn that asks for 8 tool calls, made one after the
  other as the pydantic-ai adapter makes them (9 steps: the turn and its calls), against one call per step.
- `replay_200_vs_fresh`: a continuation of an agent run with 200 saved steps (40 model turns of 4 tool calls
  each) from its claim to its first new step's call, beside a fresh run from its claim to its first step's
  call, interleaved, medians. The saved steps come with the claim (`reused`): replaying them must cost no
  round trip, which the figure's note counts.
"""

from __future__ import annotations

import time

from bench.core import Context, figure, median, record

STEPS_PER_RUN = 20
TURN_CALLS = 8
REPLAY_TURNS = 40  # of 1 model turn + 4 tool calls: 200 saved steps
REPLAY_CALLS = 4
REPLAY_SAMPLES = 8  # per side
MODEL = "bench-model"


def _queue(org, agent_name: str, n: int) -> list[int]:
    from tasks.models import Run
    from tasks.services import task_create

    ids = []
    for i in range(n):
        task = task_create(org=org, actor="bench", title=f"sdk bench {i}", agent=agent_name, input={"prompt": "b"})
        ids.append(Run.objects.get(task=task).pk)
    return ids


class Counter:
    """The runner API calls a Console makes (heartbeats aside), by an httpx request hook."""

    def __init__(self, console) -> None:
        self.paths: list[str] = []
        console._http.event_hooks["request"].append(self._seen)

    def _seen(self, request) -> None:
        if not request.url.path.endswith("/heartbeat/"):
            self.paths.append(request.url.path)

    def __len__(self) -> int:
        return len(self.paths)


def _server():
    from django.db import connection

    from bench.core import BENCH_DIR
    from tests.processes import Server

    connection.close()
    return Server(log=BENCH_DIR / "daphne-sdk.log").start()


@figure("sdk_step_vs_bare_roundtrips", "sdk_turn_calls_per_step", budget=90, order=71)
def sdk_steps(ctx: Context):
    import httpx

    from bench.fixtures import org_with_people, worker_token
    from recovery_console import Console, execute
    from tasks.accounts import agent_add

    org, _agent, _, worker = org_with_people("bench-sdk")
    agent_add(org=org, name="bench-step")
    agent_add(org=org, name="bench-turn")
    _queue(org, "bench-step", 40)
    _queue(org, "bench-turn", 1)
    token = worker_token(worker)
    server = _server()
    steps, trips = [], []
    try:
        with Console(server.url, token) as console, httpx.Client(base_url=server.url, timeout=30) as bare:
            # One model turn asking for 8 calls, then the calls, counted (a warm-up for the timed rounds).
            counter = Counter(console)
            counts = {}

            def turn(run):
                before = len(counter)
                reply = run.model(MODEL, {"prompt": run.prompt}, lambda request: {"calls": list(range(TURN_CALLS))})
                for i in reply["calls"]:
                    run.tool("noop", {"i": i}, lambda: {})
                counts["calls"] = len(counter) - before
                return "done"

            claim = console.claim("bench-turn", agents=["bench-turn"])
            if execute(console, claim, turn) != "succeeded":
                raise RuntimeError("the turn run did not succeed on the SDK")

            def agent(run):
                for n in range(STEPS_PER_RUN):
                    started = time.perf_counter()
                    run.tool("noop", {"n": n}, lambda: {})
                    steps.append(time.perf_counter() - started)
                return "done"

            def sdk_round():
                claim = console.claim("bench-step", agents=["bench-step"])
                if claim is None:
                    raise RuntimeError("no queued run left for the step figure")
                if execute(console, claim, agent) != "succeeded":
                    raise RuntimeError(f"run {claim['run']} did not succeed on the SDK")

            def bare_round():
                for _ in range(STEPS_PER_RUN):
                    started = time.perf_counter()
                    for _ in range(3):
                        bare.get("/healthz").raise_for_status()
                    trips.append(time.perf_counter() - started)

            bare_round()  # warm-up of the bare side's connection
            trips.clear()
            for i in range(40):
                if ctx.left() < 5 and i >= 4:
                    break
                for side in (sdk_round, bare_round) if i % 2 == 0 else (bare_round, sdk_round):
                    side()
            rounds = i
    finally:
        server.stop()

    def ms(samples):
        value = median(samples)
        return value * 1000 if value is not None else None

    calls = counts.get("calls")
    return [
        record(
            "sdk_step_vs_bare_roundtrips",
            value=ms(steps),
            unit="ms/step",
            baseline="three round trips to a no-op view (GET /healthz) on the same daphne",
            baseline_value=ms(trips),
            target_ratio=1.5,
            better="lower",
            note=f"medians; one tool step through the SDK (run.tool, a call that does nothing); {len(steps)} steps "
            f"in runs of {STEPS_PER_RUN}, {len(trips)} triples of GETs, {rounds} interleaved rounds",
        ),
        record(
            "sdk_turn_calls_per_step",
            value=calls / (1 + TURN_CALLS) if calls is not None else None,
            unit="calls/step",
            baseline="one HTTP call per step",
            baseline_value=1.0,
            target_ratio=2.2,
            better="lower",
            note=f"a model turn asking for {TURN_CALLS} tool calls, made one after the other (as the pydantic-ai "
            f"adapter makes them): {calls} runner API calls for {1 + TURN_CALLS} steps (claim, finish and "
            "heartbeats aside)",
        ),
    ]


# --- replay -------------------------------------------------------------------------------------------------


def _saved_run(worker, run_id: int) -> None:
    """Give the claimed agent run `run_id` 200 completed steps, as the SDK would have written them."""
    from recovery_console import payloads
    from tasks import services
    from tasks.models import Run

    run = Run.objects.get(pk=run_id)
    seq = 0
    for t in range(REPLAY_TURNS):
        request = {"turn": t}
        calls = [
            (
                "model",
                {"model": MODEL, "digest": payloads.digest(request), "request": payloads.encode(request)},
                {"calls": list(range(REPLAY_CALLS))},
            )
        ]
        calls += [("noop", {"turn": t, "i": i}, {}) for i in range(REPLAY_CALLS)]
        for tool, args, result in calls:
            seq += 1
            w = dict(worker=worker, run_id=run_id, epoch=run.lease_epoch, seq=seq)
            services.step_plan(**w, tool=tool, args=args)
            services.step_dispatch(**w)
            services.step_complete(**w, ok=True, result=result)


def _continuations(worker, agent_name: str, n: int) -> None:
    """`n` continuations of agent runs cut off after 200 completed steps, queued."""
    from datetime import timedelta

    from django.utils import timezone

    from recovery.supervisor.loop import supervise_once
    from tasks import services
    from tasks.models import Run, Step

    cut = []
    for _ in range(n):
        run = services.run_claim(worker=worker, label="bench-saved", agents=[agent_name])
        if not cut:
            _saved_run(worker, run.pk)  # through the services, as the SDK would have written them
        else:  # the others: the same rows, copied (the figure's budget is for the measurement)
            skip = {"id", "run", "parent", "reused_from"}
            fields = [f.attname for f in Step._meta.concrete_fields if f.name not in skip]
            steps = Step.objects.filter(run_id=cut[0]).order_by("seq")
            Step.objects.bulk_create([Step(run_id=run.pk, **{f: getattr(s, f) for f in fields}) for s in steps])
        cut.append(run.pk)
    Run.objects.filter(pk__in=cut).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    supervise_once(exports=False)
    queued = Run.objects.filter(continues_id__in=cut, status="queued").count()
    if queued != n:
        raise RuntimeError(f"{queued} of {n} cut-off runs were continued")


@figure("replay_200_vs_fresh", budget=90, order=72, group="sdk")
def replay(ctx: Context):
    from bench.fixtures import org_with_people, worker_token
    from recovery_console import Console, execute
    from tasks.accounts import agent_add

    org, _agent, _, worker = org_with_people("bench-replay")
    agent_add(org=org, name="bench-saved")
    agent_add(org=org, name="bench-fresh")
    _queue(org, "bench-saved", REPLAY_SAMPLES + 1)
    _continuations(worker, "bench-saved", REPLAY_SAMPLES + 1)
    _queue(org, "bench-fresh", REPLAY_SAMPLES + 1)
    token = worker_token(worker)
    server = _server()
    samples = {"bench-saved": [], "bench-fresh": []}
    requests = {"bench-saved": [], "bench-fresh": []}
    saved_counts = []
    try:
        with Console(server.url, token) as console:
            counter = Counter(console)

            def side(agent_name: str, keep: bool = True) -> None:
                reached = {}

                def first_new(request):
                    reached["at"] = time.perf_counter()
                    reached["requests"] = len(counter) - before
                    return {"calls": []}

                def agent(run):
                    saved_counts.append(run.saved_steps)
                    t = 0
                    while True:
                        reply = run.model(MODEL, {"turn": t}, first_new)
                        if not reply["calls"]:
                            return "done"
                        for i in reply["calls"]:
                            run.tool("noop", {"turn": t, "i": i}, lambda: {})
                        t += 1

                before = len(counter)
                started = time.perf_counter()
                claim = console.claim("bench-replay", agents=[agent_name])
                if claim is None or execute(console, claim, agent) != "succeeded":
                    raise RuntimeError(f"a run of {agent_name} did not succeed on the SDK")
                if keep:
                    samples[agent_name].append(reached["at"] - started)
                    requests[agent_name].append(reached["requests"])

            side("bench-saved", keep=False)  # warm-up
            side("bench-fresh", keep=False)
            for i in range(REPLAY_SAMPLES):
                if ctx.left() < 5 and i >= 2:
                    break
                for name in ("bench-saved", "bench-fresh") if i % 2 == 0 else ("bench-fresh", "bench-saved"):
                    side(name)
    finally:
        server.stop()

    def ms(name):
        value = median(samples[name])
        return value * 1000 if value is not None else None

    return [
        record(
            "replay_200_vs_fresh",
            value=ms("bench-saved"),
            unit="ms",
            baseline="a fresh run from its claim to its first step's call",
            baseline_value=ms("bench-fresh"),
            target_ratio=1.5,
            better="lower",
            note=f"medians of {len(samples['bench-saved'])} samples a side; the continuation carried "
            f"{max(saved_counts, default=0)} saved steps; runner API calls from the claim to the first new call: "
            f"{sorted(set(requests['bench-saved']))} replaying, {sorted(set(requests['bench-fresh']))} fresh "
            "(the claim and the new step's own)",
        )
    ]
