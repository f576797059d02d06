"""Shared by test modules (from test_classify.py): no test module imports another."""

from datetime import UTC, datetime, timedelta

from recovery.rules.classify import RunFacts, StepFacts


def step(seq, phase="completed", mode="replay", *, tool=None, args=None, **extra) -> StepFacts:
    """A well-formed checkpoint of step `seq` in `phase`; timestamps follow the seq order."""
    dispatched = at(seq * 10) if phase in ("dispatched", "completed", "failed") else None
    completed = at(seq * 10 + 1) if phase in ("completed", "failed") else None
    fields = dict(
        seq=seq,
        tool=tool or TOOLS.get(mode, "file_read"),
        args={"path": f"f{seq}.txt"} if args is None else args,
        phase=phase,
        recovery_mode=mode,
        has_result=phase == "completed",
        dispatched_at=dispatched,
        completed_at=completed,
    )
    fields.update(extra)
    return StepFacts(**fields)


def facts(*steps, status="interrupted", plan=None, **extra) -> RunFacts:
    if plan is None:
        plan = {"steps": [{"tool": s.tool, "args": s.args} for s in sorted(steps, key=lambda s: s.seq)]}
    return RunFacts(run_id=7, status=status, plan=plan, steps=tuple(steps), **extra)


def reason(diagnosis, code: str):
    found = [r for r in diagnosis.reasons if r.code == code]
    assert found, f"no reason {code!r} in {[r.code for r in diagnosis.reasons]}"
    return found[0]


TOOLS = {"replay": "file_read", "notify": "file_write", "forget": "shred"}


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
