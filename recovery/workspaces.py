"""Workspace validation (DESIGN §9): the disk against the manifest, before any continuation is admitted.

`continuation_create` (the one place every continuation is made: automatic,
retry, decision, follow-up, Continue now) asks `admission_check` first. When
the disk differs from what the checkpoints recorded, the continuation is not
admitted: its run is created and ends `failed` with
`workspace_validation_failed` before any worker starts it, and a
`workspace_validation` action opens on that run with the evidence, file by
file. That is committed (the caller returns the refused run instead of
raising): the difference is a fact to keep, not an error to roll back. While a
workspace action is live, every continuation and follow-up waits with the
"workspace hold", lifted by an admin's repair (recovery/repairs.py).

Also here: the reads the task page and the API show (every file with its
status, held copies, the last export).
"""

import os
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db.models import Q
from django.utils import timezone

from recovery import workspace_diff as wd
from recovery.gates import workspace_hold
from recovery.models import LIVE_ACTION_STATUSES, ActionKind, Export, HeldCopy, RecoveryAction, Repair
from tasks.errors import GateClosed
from tasks.holds import Hold
from tasks.models import WORKSPACE_VALIDATION_FAILED, Run, RunStatus, Step, StepPhase, Task, WorkspaceFile
from tasks.services import run_end, run_enqueue
from tasks.workspace import FILE_TOOLS, manifest_record, open_regular, scan, step_paths, store_read

WORKSPACE_KINDS = (ActionKind.WORKSPACE_VALIDATION, ActionKind.WORKSPACE_EXPORT)
EVIDENCE_FILES = 200  # files listed with their details in an action's evidence; the rest are counted


# --- reading both sides ------------------------------------------------------------------


def iso_ns(ns: int | None) -> str | None:
    if ns is None:
        return None
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).isoformat()


def recorded_of(task: Task) -> tuple[dict[str, wd.Entry], dict[str, WorkspaceFile]]:
    rows = {r.path: r for r in WorkspaceFile.objects.filter(task=task)}
    return {p: wd.Entry(r.size, r.mtime_ns, r.sha256) for p, r in rows.items()}, rows


def disk_of(path: str) -> dict[str, wd.Entry]:
    return {
        rel: wd.Entry(e.size, e.mtime_ns, e.sha256, e.kind, e.link) for rel, e in scan(path, with_hash=True).items()
    }


def workspace_diffs(task: Task) -> tuple[list[wd.FileDiff], dict[str, WorkspaceFile]]:
    """Every file of the manifest and of the disk, compared (contents hashed: no shortcut on size or time)."""
    recorded, rows = recorded_of(task)
    return wd.compare(recorded, disk_of(task.workspace)), rows


def remaining_steps(source: Run) -> list[wd.PlannedStep]:
    """The plan's top-level steps a continuation of `source` would still run (not completed, not dropped)."""
    plan = source.input.get("steps", []) if isinstance(source.input, dict) else []
    done = set(
        Step.objects.filter(run=source, parent_seq__isnull=True, phase=StepPhase.COMPLETED).values_list(
            "seq", flat=True
        )
    )
    dropped = {d.get("seq") for d in (source.carry or {}).get("dropped", []) if isinstance(d, dict)}
    out = []
    for seq, call in enumerate(plan, start=1):
        if seq in done or seq in dropped or not isinstance(call, dict):
            continue
        out.append(wd.PlannedStep(seq, str(call.get("tool", "")), call.get("args") or {}))
    return out


# --- evidence ------------------------------------------------------------------------------


def _side(entry: wd.Entry | None, row: WorkspaceFile | None = None) -> dict | None:
    if entry is None:
        return None
    side = {"size": entry.size, "sha256": entry.sha256, "mtime": iso_ns(entry.mtime_ns) if entry.mtime_ns else None}
    if entry.kind != "file":
        side["kind"] = entry.kind
    if entry.link is not None:
        side["link"] = entry.link
    if row is not None:
        side.update({"run": row.run_id_seen, "seq": row.seq, "tool": row.tool, "source": row.source})
    return side


def file_evidence(task: Task, diff: wd.FileDiff, row: WorkspaceFile | None, steps) -> dict:
    """One file as an action's evidence: status, recorded vs actual size / hash / time, the plan steps that
    change it, and a unified diff when both sides are small text (recorded content comes from the store)."""
    item = {
        "path": diff.path,
        "status": diff.status,
        "recorded": _side(diff.recorded, row),
        "actual": _side(diff.actual),
        "plan": wd.plan_touches(diff.path, steps),
    }
    old: bytes | None = b""
    if diff.recorded is not None:
        old = store_read(task.org.slug, diff.recorded.sha256, limit=wd.DIFF_LIMIT + 1) if row and row.kept else None
    new: bytes | None = b""
    if diff.actual is not None:
        new = _read_small(task.workspace, diff.path) if diff.actual.kind == "file" else None
    text = wd.unified_diff(diff.path, old, new)
    item["diff"] = text
    if text is None:
        if diff.actual is not None and diff.actual.kind == "link":
            item["diff_note"] = "link"
        elif old is None:
            item["diff_note"] = "not_kept"
        else:
            item["diff_note"] = "binary_or_large"
    return item


def _read_small(root: str, rel: str) -> bytes | None:
    opened = open_regular(root, rel)
    if opened is None:
        return None
    fd, _ = opened
    with os.fdopen(fd, "rb") as fh:
        return fh.read(wd.DIFF_LIMIT + 1)


def evidence_for(task: Task, diffs: list[wd.FileDiff], rows: dict, *, source: Run, checked: int) -> dict:
    steps = remaining_steps(source)
    counts = {s: sum(1 for d in diffs if d.status == s) for s in (wd.CHANGED, wd.ADDED, wd.MISSING)}
    return {
        "workspace": task.workspace,
        "source_run": source.pk,
        "checked": checked,
        "counts": counts,
        "files": [file_evidence(task, d, rows.get(d.path), steps) for d in diffs[:EVIDENCE_FILES]],
        "more": max(0, len(diffs) - EVIDENCE_FILES),
        "remaining_steps": [{"seq": s.seq, "tool": s.tool} for s in steps],
    }


def summary(diffs: list[wd.FileDiff], limit: int = 5) -> str:
    """'2 files differ from the manifest: a.txt changed, b.txt added.' (plain data words, for run.error_detail)."""
    shown = ", ".join(f"{d.path} {d.status}" for d in diffs[:limit])
    more = f" and {len(diffs) - limit} more" if len(diffs) > limit else ""
    noun = "file differs" if len(diffs) == 1 else "files differ"
    return f"{len(diffs)} {noun} from the manifest: {shown}{more}."


# --- the hold ----------------------------------------------------------------------------


def live_action(task_id: int, *, exclude: int | None = None) -> RecoveryAction | None:
    """The task's live workspace action (the oldest), which holds every continuation and follow-up."""
    qs = RecoveryAction.objects.filter(task_id=task_id, kind__in=WORKSPACE_KINDS, status__in=LIVE_ACTION_STATUSES)
    if exclude is not None:
        qs = qs.exclude(pk=exclude)
    return qs.order_by("id").first()


def hold_of(action: RecoveryAction) -> Hold:
    return workspace_hold(action.pk, action.kind)


def hold_error(action: RecoveryAction) -> GateClosed:
    hold = hold_of(action)
    return GateClosed(hold.detail, gate=hold.gate, lifted_by=hold.lifted_by, action=action.pk)


class WorkspaceHeld(GateClosed):
    """A continuation was refused because the workspace differs; the refused run and its action are saved.

    Raised only after the transaction that saved them committed (or returned as
    a response inside an outer one), never in place of saving them.
    """

    def __init__(self, *, action: RecoveryAction, run: Run):
        hold = hold_of(action)
        super().__init__(
            f"{run.error_detail} Nothing was continued.",
            gate=hold.gate,
            lifted_by=hold.lifted_by,
            action=action.pk,
            run=run.pk,
        )


@dataclass(frozen=True)
class Declared:
    """What a person's decision says about the disk: paths a step declared performed wrote (or all of them)."""

    paths: frozenset[str] = frozenset()
    everything: bool = False


def declared_by(steps: dict[int, Step], performed) -> Declared:
    paths: set[str] = set()
    everything = False
    for seq in performed or ():
        step = steps.get(seq)
        if step is None:
            continue
        named, scan_all = step_paths(step.tool, step.args)
        paths.update(named)
        everything = everything or scan_all
    return Declared(frozenset(paths), everything)


def admission_check(*, source: Run, declared: Declared) -> tuple[list[wd.FileDiff], dict, int] | None:
    """The differences that refuse a continuation of `source`, or None when the disk matches the manifest.

    Refused at once (GateClosed `workspace_hold`) while a workspace action is live.
    Files a step declared performed wrote are taken as that step's effect.
    """
    held = live_action(source.task_id)
    if held is not None:
        raise hold_error(held)
    task = source.task
    diffs, rows = workspace_diffs(task)
    checked = len(diffs)
    explained = {d.path for d in diffs} if declared.everything else declared.paths
    differing = wd.differing(diffs, explained=explained)
    if not differing:
        return None
    return differing, rows, checked


def record_declared(*, source: Run, steps: dict[int, Step], performed) -> None:
    """A step a person declared performed: the disk at its paths is recorded as its effect (source `decision`)."""
    task = Task.objects.select_related("org").get(pk=source.task_id)
    for seq in performed or ():
        step = steps.get(seq)
        if step is None:
            continue
        paths, scan_all = step_paths(step.tool, step.args)
        if paths or scan_all:
            manifest_record(task=task, step=step, paths=paths, scan_all=scan_all, source="decision")


def refuse_continuation(*, source: Run, actor, reason: str, carry: dict, found) -> Run:
    """The continuation's run, created and ended `failed` (never started), and the action listing each file."""
    from recovery.actions import action_open

    diffs, rows, checked = found
    task = Task.objects.select_related("org", "agent").get(pk=source.task_id)
    evidence = evidence_for(task, diffs, rows, source=source, checked=checked)
    detail = summary(diffs)
    run = run_enqueue(
        task=task,
        actor=actor,
        input=source.input,
        continues=source,
        carry={**carry, "refused": WORKSPACE_VALIDATION_FAILED},
        payload={"reason": reason},
    )
    run = run_end(
        run,
        RunStatus.FAILED,
        actor=actor,
        kind="run_refused",
        payload={"error_code": WORKSPACE_VALIDATION_FAILED, "reason": reason, "files": len(diffs)},
        expect=RunStatus.QUEUED,
        error_code=WORKSPACE_VALIDATION_FAILED,
        error_detail=detail,
        finished_at=timezone.now(),
    )
    run = Run.objects.select_related("task").get(pk=run.pk)
    action = action_open(
        run=run,
        kind=ActionKind.WORKSPACE_VALIDATION,
        cause=WORKSPACE_VALIDATION_FAILED,
        evidence=evidence,
        recovery_owner="role:admin",
        actor=actor,
    )
    detail = f"{detail} Recovery action #{action.pk} lists them; it never started."
    Run.objects.filter(pk=run.pk).update(error_detail=detail)
    run.error_detail = detail
    return run


def refused(run: Run) -> bool:
    return run.status == RunStatus.FAILED and run.started_at is None and run.error_code == WORKSPACE_VALIDATION_FAILED


def refusal_of(run: Run) -> WorkspaceHeld:
    action = RecoveryAction.objects.filter(run=run, kind=ActionKind.WORKSPACE_VALIDATION).order_by("-id").first()
    return WorkspaceHeld(action=action, run=run)


# --- reads for the task page and the API ------------------------------------------------------


@dataclass
class FileRow:
    path: str
    status: str
    recorded: dict | None
    actual: dict | None
    row: WorkspaceFile | None = None


@dataclass
class WorkspaceState:
    path: str
    files: list[FileRow]
    hold: RecoveryAction | None
    held_copies: list[HeldCopy]
    export: Export | None
    exists: bool = True


def held_paths(action: RecoveryAction | None) -> dict[str, dict]:
    """Files the latest reconcile of a live validation action held, by path."""
    if action is None or action.kind != ActionKind.WORKSPACE_VALIDATION:
        return {}
    repair = Repair.objects.filter(action=action, repair="reconcile").order_by("-id").first()
    if repair is None or not isinstance(repair.result, dict):
        return {}
    return {h["path"]: h for h in repair.result.get("held", []) if isinstance(h, dict) and "path" in h}


def workspace_state(task: Task) -> WorkspaceState:
    """Every file of the task's workspace with its status now (contents compared), held copies, the last export."""
    diffs, rows = workspace_diffs(task)
    hold = live_action(task.pk)
    held = held_paths(hold)
    files = [
        FileRow(
            d.path,
            "held" if d.path in held and d.status != wd.SAME else d.status,
            _side(d.recorded, rows.get(d.path)),
            _side(d.actual),
            rows.get(d.path),
        )
        for d in diffs
    ]
    return WorkspaceState(
        path=task.workspace,
        files=files,
        hold=hold,
        held_copies=list(HeldCopy.objects.filter(task=task).order_by("-id")),
        export=Export.objects.filter(task=task).order_by("-id").first(),
        exists=bool(task.workspace) and os.path.isdir(task.workspace),
    )


def held_listing(copy: HeldCopy) -> list[FileRow]:
    """The files a held copy keeps, as they are on disk now (nothing ever removes them)."""
    return [
        FileRow(rel, "held", None, _side(wd.Entry(e.size, e.mtime_ns, e.sha256, e.kind, e.link)))
        for rel, e in sorted(scan(copy.path, with_hash=True).items())
    ]


def writer_runs_live(task: Task) -> Run | None:
    """A run with a live lease that writes in this task's workspace: its own, or a repair task's sharing it."""
    now = timezone.now()
    return (
        Run.objects.filter(Q(task=task) | Q(task__workspace=task.workspace))
        .filter(status__in=(RunStatus.RUNNING, RunStatus.STOPPING), lease_expires_at__gt=now)
        .order_by("id")
        .first()
    )


__all__ = ["FILE_TOOLS", "WORKSPACE_KINDS", "HeldCopy", "WorkspaceHeld", "admission_check", "refuse_continuation"]
