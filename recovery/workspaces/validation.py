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
"workspace hold", lifted by an admin's repair (recovery/workspaces/repairs.py).

Also here: the reads the task page and the API show (every file with its
status, held copies, the last export).
"""

import dataclasses
import os
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from django.db.models import Q
from django.utils import timezone

from recovery.models import LIVE_ACTION_STATUSES, ActionKind, Export, HeldCopy, RecoveryAction, Repair
from recovery.rules import workspace_diff as wd
from recovery.rules.classify import WORKSPACE_KINDS
from recovery.rules.gates import workspace_hold
from tasks.errors import GateClosed
from tasks.holds import Hold
from tasks.models import (
    WORKSPACE_VALIDATION_FAILED,
    Run,
    RunStatus,
    Step,
    StepPhase,
    Task,
    WorkspaceFile,
    WorkspaceReport,
)
from tasks.selectors import visible_tasks
from tasks.worker_workspaces import held_by_worker, iso_ns, side_of
from tasks.workspace import (
    FILE,
    FILE_TOOLS,
    Budget,
    Hasher,
    OnDisk,
    Scan,
    UnsafePath,
    clean_relpath,
    manifest_identities,
    manifest_record,
    open_regular,
    read_ahead,
    scan,
    shown,
    step_paths,
    store_read,
    wire,
)
from tasks.workspace import _link_text as link_text

EVIDENCE_FILES = 200  # files listed with their details in an action's evidence; the rest are counted


# --- reading both sides ------------------------------------------------------------------


def entry_of(e: OnDisk) -> wd.Entry:
    return wd.Entry(e.size, e.mtime_ns, e.sha256, e.kind, e.link, e.ctime_ns, e.ino, e.empty, e.not_kept)


def recorded_of(task: Task) -> tuple[dict[str, wd.Entry], dict[str, WorkspaceFile]]:
    rows = {r.path: r for r in WorkspaceFile.objects.filter(task=task)}
    return {
        p: wd.Entry(
            r.size, r.mtime_ns, r.sha256 or None, r.kind, link_text(r.link), r.ctime_ns, r.ino, r.kind == "dir",
            r.not_kept,
        )
        for p, r in rows.items()
    }, rows  # fmt: skip


# What was read of a workspace ahead of a transaction, by directory (`read_ahead_for`).
_AHEAD: ContextVar[dict[str, Scan] | None] = ContextVar("workspace_read_ahead", default=None)


@contextmanager
def read_ahead_for(*tasks: Task, budget: Budget | None = None):
    """Outside any transaction, read each task's workspace — a bounded walk, and the content of every file whose
    size, times or inode differ from its record, within `budget` — for what runs inside the block (validation,
    a repair, a decision's record) to compare without reading content under a lock. Yields the budget: when it
    is `spent`, some file was left unread."""
    budget = budget if budget is not None else Budget()
    found = dict(_AHEAD.get() or {})
    for task in tasks:
        if budget.spent:
            break  # the caller leaves what it could not read for later
        if task is not None and task.workspace and task.workspace not in found and not held_by_worker(task):
            ahead = read_ahead(task.workspace, known=manifest_identities(task), budget=budget, keep_in=task.org.slug)
            if ahead.limit:  # a walk the budget did not allow is no reading: the block walks for itself
                found[task.workspace] = ahead
    token = _AHEAD.set(found)
    try:
        yield budget
    finally:
        _AHEAD.reset(token)


def _is_id(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**63


@contextmanager
def read_ahead_for_action(action_id, user=None, *, budget: Budget | None = None):
    """`read_ahead_for` the task of a recovery action the caller may see (nothing is read for one it may not)."""
    task = None
    if _is_id(action_id):
        qs = RecoveryAction.objects.filter(pk=action_id).select_related("task__org")
        if user is not None and not isinstance(user, str):
            qs = qs.filter(task__in=visible_tasks(user))
        found = qs.first()
        task = found.task if found is not None else None
    with read_ahead_for(task, budget=budget) as spent:
        yield spent


@contextmanager
def read_ahead_for_task(task_id, user=None, *, budget: Budget | None = None):
    """`read_ahead_for` a task the caller may see."""
    task = None
    if _is_id(task_id):
        qs = Task.objects.filter(pk=task_id).select_related("org")
        if user is not None and not isinstance(user, str):
            qs = visible_tasks(user).filter(pk=task_id).select_related("org")
        task = qs.first()
    with read_ahead_for(task, budget=budget) as spent:
        yield spent


def ahead_of(task: Task) -> Scan | None:
    return (_AHEAD.get() or {}).get(task.workspace)


def disk_of(task: Task, *, budget: Budget | None = None) -> Scan:
    """The task's workspace on disk: as read ahead of this transaction, else walked now — its files read within
    `budget`, or (None, inside a transaction) only hashes read earlier are used."""
    ahead = ahead_of(task)
    if ahead is not None:
        return ahead
    if budget is None:
        found = scan(task.workspace)
        hasher = Hasher(budget=None)
        found.entries = {k: hasher.fill(task.workspace, e) for k, e in found.entries.items()}
        return found
    return read_ahead(task.workspace, known=manifest_identities(task), budget=budget, keep_in=task.org.slug)


@dataclass
class Compared:
    diffs: list[wd.FileDiff]
    rows: dict[str, WorkspaceFile]
    disk: Scan = field(default_factory=Scan)


def compare_task(task: Task, *, budget: Budget | None = None) -> Compared:
    """Every entry of the manifest and of the disk, compared where the walk reached."""
    recorded, rows = recorded_of(task)
    disk = disk_of(task, budget=budget)
    actual = {}
    for k, e in disk.entries.items():
        a = entry_of(e)
        r = recorded.get(k)
        if a.kind == FILE and a.sha256 is None and r is not None and r.ctime_ns and r.identity == a.identity:
            a = dataclasses.replace(a, sha256=r.sha256, not_kept=r.not_kept)  # the very file that was recorded
        actual[k] = a
    return Compared(wd.compare(recorded, actual, covers=disk.covers), rows, disk)


def workspace_diffs(task: Task, *, budget: Budget | None = None) -> tuple[list[wd.FileDiff], dict[str, WorkspaceFile]]:
    c = compare_task(task, budget=budget)
    return c.diffs, c.rows


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
    side = {"size": entry.size, "sha256": entry.sha256, "mtime": iso_ns(entry.mtime_ns)}
    if entry.kind != FILE:
        side["kind"] = entry.kind
    if entry.link is not None:
        side["link"] = wire_text(entry.link)
    if entry.kind == FILE and entry.sha256 is None:
        side["hashed"] = False  # its content was not read: too large, or not within this read's budget
    if entry.kind == FILE and entry.not_kept:
        side["not_kept"] = entry.not_kept
    if row is not None:
        side.update({"run": row.run_id_seen, "seq": row.seq, "tool": row.tool, "source": row.source})
        if row.kind == FILE and not row.kept and row.not_kept_detail:
            side["not_kept_detail"] = row.not_kept_detail
    return side


def wire_text(value: str):
    """A text from disk (a link's target) in wire form: itself, or `{"$text": …}` when it holds raw bytes."""
    from tasks import payloads

    return payloads.encode(value)


def file_evidence(task: Task, diff: wd.FileDiff, row: WorkspaceFile | None, steps) -> dict:
    """One entry as an action's evidence: status, recorded vs actual kind / size / hash / time (a link's target),
    the plan steps that change it, and a unified diff when both sides are small text (recorded content comes
    from the store)."""
    item = {
        "path": wire(diff.path),
        "status": diff.status,
        "recorded": _side(diff.recorded, row),
        "actual": _side(diff.actual),
        "plan": wd.plan_touches(diff.path, steps),
    }
    if not diff.verified:
        item["verified"] = False  # its times moved; its content could not be read to compare
    old: bytes | None = b""
    if diff.recorded is not None:
        kept = row is not None and row.kept and diff.recorded.kind == FILE
        old = store_read(task.org.slug, diff.recorded.sha256, limit=wd.DIFF_LIMIT + 1) if kept else None
    new: bytes | None = b""
    if diff.actual is not None:
        new = _read_small(task.workspace, diff.path) if diff.actual.kind == FILE else None
    text = wd.unified_diff(shown(diff.path), old, new)
    item["diff"] = text
    if text is None:
        if diff.actual is not None and diff.actual.kind == "link":
            item["diff_note"] = "link"
        elif diff.actual is not None and diff.actual.kind != FILE:
            item["diff_note"] = "special"
        elif old is None:
            item["diff_note"] = "not_kept"
        else:
            item["diff_note"] = "binary_or_large"
    return item


def _read_small(root: str, rel: str) -> bytes | None:
    opened = open_regular(root, rel)
    if opened is None:
        return None
    fd, st = opened
    if st.st_size > wd.DIFF_LIMIT:
        os.close(fd)
        return None
    with os.fdopen(fd, "rb") as fh:
        return fh.read(wd.DIFF_LIMIT + 1)


def walk_bounds(disk: Scan) -> dict:
    """How far a walk reached, when it did not reach everything (evidence, the API, the panel)."""
    out = {}
    if not disk.complete:
        out["walk"] = {"limit": disk.limit, "last": wire(disk.last_key) if disk.last else None}
    if disk.unread:
        out["unread"] = len(disk.unread)
    if disk.too_long:
        out["too_long"] = disk.too_long
    return out


def evidence_for(
    task: Task, diffs: list[wd.FileDiff], rows: dict, *, source: Run, checked: int, disk: Scan | None = None
) -> dict:
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
        **(walk_bounds(disk) if disk is not None else {}),
    }


def summary(diffs: list[wd.FileDiff], limit: int = 5) -> str:
    """'2 files differ from the manifest: a.txt changed, b.txt added.' (plain data words, for run.error_detail)."""
    listed = ", ".join(f"{shown(d.path)} {d.status}" for d in diffs[:limit])
    more = f" and {len(diffs) - limit} more" if len(diffs) > limit else ""
    noun = "file differs" if len(diffs) == 1 else "files differ"
    return f"{len(diffs)} {noun} from the manifest: {listed}{more}."


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


def admission_check(*, source: Run, declared: Declared) -> tuple[list[wd.FileDiff], dict, int, Scan] | None:
    """The differences that refuse a continuation of `source`, or None when the disk matches the manifest.

    Refused at once (GateClosed `workspace_hold`) while a workspace action is live.
    Entries a step declared performed wrote are taken as that step's effect.
    Inside the caller's transaction: the disk as read ahead of it (`read_ahead_for`), else a walk that reads
    no content (a file whose times moved and whose content no earlier read hashed is then a difference).
    """
    held = live_action(source.task_id)
    if held is not None:
        raise hold_error(held)
    task = source.task
    if held_by_worker(task):
        return None  # the worker holding it compares its disk before the continuation runs (`reports`)
    c = compare_task(task)
    explained = {d.path for d in c.diffs} if declared.everything else declared.paths
    differing = wd.differing(c.diffs, explained=explained)
    if not differing:
        return None
    return differing, c.rows, len(c.diffs), c.disk


def record_declared(*, source: Run, steps: dict[int, Step], performed) -> None:
    """A step a person declared performed: the disk at its paths is recorded as its effect (source `decision`)."""
    task = Task.objects.select_related("org").get(pk=source.task_id)
    if held_by_worker(task):
        return  # recorded from the worker's report before the continuation runs (`reports`)
    for seq in performed or ():
        step = steps.get(seq)
        if step is None:
            continue
        paths, scan_all = step_paths(step.tool, step.args)
        if paths or scan_all:
            manifest_record(
                task=task, step=step, paths=paths, scan_all=scan_all, source="decision", disk=ahead_of(task)
            )


def refused(run: Run) -> bool:
    return run.status == RunStatus.FAILED and run.started_at is None and run.error_code == WORKSPACE_VALIDATION_FAILED


def refusal_of(run: Run) -> WorkspaceHeld:
    action = RecoveryAction.objects.filter(run=run, kind=ActionKind.WORKSPACE_VALIDATION).order_by("-id").first()
    return WorkspaceHeld(action=action, run=run)


# --- reads for the task page and the API ------------------------------------------------------


@dataclass
class FileRow:
    path: str  # the stored key (tasks.workspace.key_of); the API shows `wire(path)`
    status: str
    recorded: dict | None
    actual: dict | None
    row: WorkspaceFile | None = None
    verified: bool = True


@dataclass
class WorkspaceState:
    path: str
    files: list[FileRow]
    hold: RecoveryAction | None
    held_copies: list[HeldCopy]
    export: Export | None
    exists: bool = True
    bounds: dict = field(default_factory=dict)  # how far the walk reached, when not everywhere (walk_bounds)
    # Where the workspace is: "server" (read now), or "worker" (as the worker holding it last reported).
    on: str = "server"
    report: dict | None = None  # the last report a worker made of it: when, which worker, of what


def held_paths(action: RecoveryAction | None) -> dict[str, dict]:
    """Entries the latest reconcile of a live validation action held, by stored key."""
    if action is None or action.kind != ActionKind.WORKSPACE_VALIDATION:
        return {}
    repair = Repair.objects.filter(action=action, repair="reconcile", status="held").order_by("-id").first()
    if repair is None or not isinstance(repair.result, dict):
        return {}
    out = {}
    for h in repair.result.get("held", []):
        if isinstance(h, dict) and "path" in h:
            try:
                out[clean_relpath(h["path"])] = h
            except UnsafePath:
                continue
    return out


def workspace_state(task: Task) -> WorkspaceState:
    """Every entry of the task's workspace with its status now, held copies, the last export.

    Read for a page or the API, outside any transaction: content is read only for files whose size, times or
    inode moved since they were recorded, within this request's budget (CONSOLE_WORKSPACE_HASH_BUDGET).
    """
    if held_by_worker(task):
        return reported_state(task)
    c = compare_task(task, budget=Budget())
    hold = live_action(task.pk)
    held = held_paths(hold)
    files = [
        FileRow(
            d.path,
            "held" if d.path in held and d.status != wd.SAME else d.status,
            _side(d.recorded, c.rows.get(d.path)),
            _side(d.actual),
            c.rows.get(d.path),
            d.verified,
        )
        for d in c.diffs
    ]
    return WorkspaceState(
        path=task.workspace,
        files=files,
        hold=hold,
        held_copies=list(HeldCopy.objects.filter(task=task).order_by("-id")),
        export=Export.objects.filter(task=task).order_by("-id").first(),
        exists=bool(task.workspace) and os.path.isdir(task.workspace),
        bounds=walk_bounds(c.disk),
    )


def _recorded_side(row: WorkspaceFile) -> dict:
    return _side(recorded_of_row(row), row)


def recorded_of_row(r: WorkspaceFile) -> wd.Entry:
    return wd.Entry(
        r.size, r.mtime_ns, r.sha256 or None, r.kind, link_text(r.link), r.ctime_ns, r.ino, r.kind == "dir", r.not_kept
    )


def reported_state(task: Task) -> WorkspaceState:
    """A workspace a worker holds, as it last reported it (the server never reads that disk): every manifest
    entry, with the status the last validation or repair found for it unless a step recorded it since, and
    what that report found added. `report` says when, which worker, and of what."""
    rows = {r.path: r for r in WorkspaceFile.objects.filter(task=task)}
    checked = WorkspaceReport.objects.filter(task=task, kind__in=("validation", "repair")).order_by("-id").first()
    found: dict[str, dict] = {}
    if checked is not None:
        for item in checked.files:
            try:
                found[clean_relpath(item.get("path"))] = item
            except (UnsafePath, AttributeError):
                continue
    files = []
    for key in sorted(set(rows) | {k for k, i in found.items() if i.get("status") == wd.ADDED}):
        row, item = rows.get(key), found.get(key)
        if item is not None and (row is None or row.recorded_at <= checked.created_at):
            files.append(
                FileRow(key, item["status"], _recorded_side(row) if row else None, side_of(item.get("actual")), row)
            )
        elif row is not None:
            files.append(FileRow(key, wd.SAME, _recorded_side(row), _recorded_side(row), row))
    last = WorkspaceReport.objects.filter(task=task).order_by("-id").first()
    hold = live_action(task.pk)
    held = held_paths(hold)
    files = [dataclasses.replace(f, status="held") if f.path in held and f.status != wd.SAME else f for f in files]
    return WorkspaceState(
        path=task.workspace_root,
        files=files,
        hold=hold,
        held_copies=list(HeldCopy.objects.filter(task=task).order_by("-id")),
        export=Export.objects.filter(task=task).order_by("-id").first(),
        exists=last is not None,
        on="worker",
        report=(
            {
                "at": last.created_at,
                "worker": last.worker,
                "kind": last.kind,
                "label": last.label or task.workspace_label,
            }
            if last is not None
            else None
        ),
    )


def held_listing(copy: HeldCopy) -> list[FileRow]:
    """The entries a held copy keeps, as they are on disk now (nothing ever removes them); content read within
    this request's budget. A copy on a worker's disk is listed as the repair reported keeping it."""
    if held_by_worker(copy.task):
        out = []
        for f in copy.files:
            try:
                key = clean_relpath(f.get("path"))
            except (UnsafePath, AttributeError):
                continue
            out.append(FileRow(key, "held", None, {"size": f.get("size"), "sha256": f.get("sha256"), "mtime": None}))
        return out
    found = scan(copy.path)
    hasher = Hasher(budget=Budget())
    return [
        FileRow(key, "held", None, _side(entry_of(hasher.fill(copy.path, e))))
        for key, e in sorted(found.entries.items())
        if not (e.kind == "dir" and not e.empty)
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


__all__ = ["FILE_TOOLS", "WORKSPACE_KINDS", "HeldCopy", "WorkspaceHeld", "admission_check"]
