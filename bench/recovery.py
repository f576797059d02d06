"""recovery_latency_backlog: from a crashed run's lease lapsing to its continuation being started by a
worker, with 400 runs of newer tasks queued ahead of the workers, beside the same with nothing queued.

Real services throughout: a supervisor thread runs `supervise_once` (which expires the lease, classifies
the run and queues its continuation), and four worker threads claim through `run_claim`, checkpoint every
step of what they claimed and finish it (40 ms of work per run). The crashed run is one whose claimer
stopped renewing a 1-second lease after dispatching a replay-safe step. Trials alternate with and without
the backlog; the figure is the median of each side.
"""

from __future__ import annotations

import threading
import time

from bench.core import Context, figure, median, record

BACKLOG = 400
WORKERS = 4
WORK_SECONDS = 0.04
POLL_SECONDS = 0.05
SUPERVISE_SECONDS = 0.1
TRIALS = 5  # per side


class Pool:
    """Worker threads that claim, run every step of the claimed run's plan, and finish it."""

    def __init__(self, worker):
        self.worker = worker
        self.go = threading.Event()
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self._loop, args=(i,), daemon=True) for i in range(WORKERS)]

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def close(self):
        self.stop.set()
        self.go.set()
        for t in self.threads:
            t.join(10)

    def _loop(self, i: int) -> None:
        from django.db import connections

        from tasks import services

        try:
            while not self.stop.is_set():
                if not self.go.wait(0.1):
                    continue
                run = services.run_claim(worker=self.worker, label=f"bench-w{i}")
                if run is None:
                    time.sleep(POLL_SECONDS)
                    continue
                self._execute(services, run)
        except BaseException as exc:
            self.errors.append(exc)
        finally:
            connections.close_all()

    def _execute(self, services, run) -> None:
        time.sleep(WORK_SECONDS)
        epoch = run.lease_epoch
        reused = set(run.steps.filter(reused_from__isnull=False).values_list("seq", flat=True))
        for seq, call in enumerate(run.input.get("steps", []), start=1):
            if seq in reused:
                continue
            w = dict(worker=self.worker, run_id=run.pk, epoch=epoch, seq=seq)
            services.step_plan(**w, tool=call["tool"], args=call.get("args", {}))
            services.step_dispatch(**w)
            services.step_complete(**w, ok=True, result={"ok": True})
        services.run_finish(worker=self.worker, run_id=run.pk, epoch=epoch, status="succeeded")


class Supervisor(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)
        self.halt = threading.Event()
        self.errors: list[BaseException] = []

    def run(self):
        from django.db import connections

        from recovery.supervisor.loop import supervise_once

        try:
            while not self.halt.is_set():
                supervise_once(label="bench-supervisor", interval=SUPERVISE_SECONDS)
                self.halt.wait(SUPERVISE_SECONDS)
        except BaseException as exc:
            self.errors.append(exc)
        finally:
            connections.close_all()


def _crash(org, agent, worker) -> int:
    """A run whose worker died after dispatching step 1 (replay-safe): its 1-second lease will lapse."""
    from django.conf import settings

    from tasks import services
    from tasks.models import Run

    task = services.task_create(
        org=org, actor="bench", title="crashes", agent=agent.name, input={"steps": [{"tool": "sleep", "args": {}}]}
    )
    lease = settings.CONSOLE_LEASE_SECONDS
    settings.CONSOLE_LEASE_SECONDS = 1
    try:
        run = services.run_claim(worker=worker, label="bench-crasher")
    finally:
        settings.CONSOLE_LEASE_SECONDS = lease
    assert run is not None and run.task_id == task.pk, "the pool is paused: the crasher claims its own task"
    services.step_plan(worker=worker, run_id=run.pk, epoch=run.lease_epoch, seq=1, tool="sleep", args={})
    services.step_dispatch(worker=worker, run_id=run.pk, epoch=run.lease_epoch, seq=1)
    return Run.objects.get(pk=run.pk).pk


def _trial(org, agent, worker, pool: Pool, *, backlog: int, timeout: float) -> float | None:
    from bench.fixtures import queue_tasks
    from tasks.models import Run

    pool.go.clear()
    time.sleep(POLL_SECONDS * 3)  # let claims in flight finish
    crashed = _crash(org, agent, worker)
    if backlog:
        queue_tasks(org, agent, backlog, title="newer work")
    pool.go.set()
    deadline = time.monotonic() + timeout
    latency = None
    while time.monotonic() < deadline:
        cont = Run.objects.filter(continues_id=crashed, started_at__isnull=False).first()
        if cont is not None:
            lapsed = Run.objects.get(pk=crashed).lease_expires_at
            latency = (cont.started_at - lapsed).total_seconds()
            break
        time.sleep(0.02)
    # Drain what is left before the next trial.
    while time.monotonic() < deadline + 30 and Run.objects.filter(org=org, status__in=("queued", "running")).exists():
        time.sleep(0.05)
    if pool.errors:
        raise pool.errors[0]
    return latency


@figure("recovery_latency_backlog", budget=90, order=40)
def recovery_latency(ctx: Context):
    from django.db import connections

    from bench.fixtures import org_with_people

    org, agent, _, worker = org_with_people("bench-recovery")
    pool = Pool(worker).start()
    supervisor = Supervisor()
    supervisor.start()
    with_backlog, without = [], []
    try:
        for i in range(TRIALS):
            for backlog in (BACKLOG, 0) if i % 2 == 0 else (0, BACKLOG):
                if ctx.left() < 15 and with_backlog and without:
                    break
                latency = _trial(org, agent, worker, pool, backlog=backlog, timeout=min(30, max(5, ctx.left() - 5)))
                (with_backlog if backlog else without).append(latency)
    finally:
        pool.close()
        supervisor.halt.set()
        supervisor.join(10)
        connections.close_all()
    if supervisor.errors:
        raise supervisor.errors[0]
    measured_with = [s for s in with_backlog if s is not None]
    measured_without = [s for s in without if s is not None]
    missed = len(with_backlog) - len(measured_with) + len(without) - len(measured_without)
    return [
        record(
            "recovery_latency_backlog",
            value=median(measured_with) if measured_with else None,
            unit="s",
            baseline="the same with nothing queued",
            baseline_value=median(measured_without) if measured_without else None,
            target_ratio=1.5,
            better="lower",
            note=f"lease lapse → continuation started, median of {len(measured_with)} + {len(measured_without)} "
            f"alternating trials ({WORKERS} workers, {WORK_SECONDS * 1000:.0f} ms per run, supervisor every "
            f"{SUPERVISE_SECONDS} s, {BACKLOG} newer runs queued)" + (f"; {missed} trials timed out" if missed else ""),
        )
    ]
