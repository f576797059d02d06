"""classify_50k_steps: diagnose() of a stored 50,000-step run (read + classify) beside run_facts() (the read
alone), interleaved: what classification adds to reading the checkpoints."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bench.core import Context, figure, interleave, median, record, timed

STEPS = 50_000
TOOLS = [("file_read", "replay"), ("file_write", "notify"), ("sleep", "replay"), ("custom_tool", "forget")]


def _shape(seq: int, n: int) -> dict:
    """Step `seq` of an n-step interrupted run: completed (some failed), the last a dispatched write."""
    tool, mode = TOOLS[seq % len(TOOLS)]
    if seq == n:
        return {"tool": "file_write", "mode": "notify", "phase": "dispatched"}
    if seq % 997 == 0:
        return {"tool": tool, "mode": mode, "phase": "failed"}
    return {"tool": tool, "mode": mode, "phase": "completed"}


def _seed(org, agent):
    from django.db import transaction

    from tasks.models import Run, RunStatus, Step, Task

    plan = {"steps": [{"tool": _shape(s, STEPS)["tool"], "args": {"n": s}} for s in range(1, STEPS + 1)]}
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
    for seq in range(1, STEPS + 1):
        shape = _shape(seq, STEPS)
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
        Step.objects.bulk_create(rows, batch_size=5_000)
    return Run.objects.get(pk=run.pk)


@figure("classify_50k_steps", budget=75, order=20)
def classify_50k(ctx: Context):
    from bench.fixtures import org_with_people, vacuum_analyze
    from recovery.selectors import diagnose, run_facts

    org, agent, _, _ = org_with_people("bench-classify")
    run = _seed(org, agent)
    vacuum_analyze()
    disposition = diagnose(run).disposition  # also a warm-up of both paths
    run_facts(run)
    a, b = interleave(lambda: timed(lambda: diagnose(run)), lambda: timed(lambda: run_facts(run)), rounds=6, ctx=ctx)
    return [
        record(
            "classify_50k_steps",
            value=median(a) * 1000,
            unit="ms",
            baseline="run_facts() alone (the read)",
            baseline_value=median(b) * 1000,
            target_ratio=1.5,
            better="lower",
            note=f"median of {len(a)} interleaved pairs over a stored {STEPS:,}-step run; disposition {disposition}",
        )
    ]
