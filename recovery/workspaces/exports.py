"""Export (DESIGN §9): after a run succeeds, copy its task's workspace to the task's `export_destination`.

A supervisor duty (`exports_run`), once per succeeded run; a failure opens a
`workspace_export` action with the error, and an admin's Retry export
(recovery/workspaces/repairs.py) copies again once the cause is fixed.

Nothing at the destination is lost: a file with the same content is left as
it is; a file with other content is first kept as a held copy of the task,
then replaced (written to a temporary file and renamed, so nobody reads half a
file). Symbolic links are never followed, on either side: a link in the
workspace is skipped and listed; a link or special file at the destination, or
a destination path through a link, refuses the export.
"""

import errno
import os
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, OuterRef, Q, Subquery
from django.utils import timezone

from recovery.action_log import action_open
from recovery.humanize import os_error_text
from recovery.models import ActionKind, Export, HeldCopy
from tasks import payloads
from tasks.errors import Invalid, NotEligible, NotFound
from tasks.events import event_append
from tasks.export_roots import destination_refusal
from tasks.models import Run, RunStatus, Task
from tasks.workspace import (
    copy_file,
    file_entry,
    file_sha,
    make_fresh_dir,
    name_of,
    scan,
    shown,
    wire,
)

EXPORT_FAILED = "export_failed"


class ExportError(Exception):
    def __init__(self, message: str, result: dict):
        super().__init__(message)
        self.result = result


def _file_in_the_way(path: str) -> str | None:
    """The nearest of `path` and its parents that exists as something other than a folder, if any."""
    here = Path(path)
    for candidate in (here, *here.parents):
        if os.path.lexists(candidate):
            return None if candidate.is_dir() and not candidate.is_symlink() else str(candidate)
    return None


def os_error_words(exc: OSError, dest: str) -> str:
    """An export's OS error as a sentence that names what to fix: a file standing where the destination needs a
    folder is named as such (the OS says only "Not a directory"), the rest in recovery.words' terms."""
    if exc.errno in (errno.ENOTDIR, errno.EEXIST):
        blocker = _file_in_the_way(exc.filename or dest)
        if blocker is not None:
            what = "the destination itself" if blocker == str(Path(dest)) else f"a parent of the destination {dest}"
            return (
                f"{blocker} is a file, not a folder, and it is {what}: nothing can be copied into it. Move or "
                "rename that file, or choose another destination, then retry the export."
            )
    return f"Copying to {dest} failed: {os_error_text(exc.errno, exc.strerror or str(exc), exc.filename)}."


def _held_dir(task: Task, what: str) -> Path:
    base = Path(task.workspace).parent / f"task-{task.pk}.held"
    return make_fresh_dir(base, what)


def copy_workspace(task: Task, dest: str) -> dict:
    """Copy every regular file of the task's workspace to `dest`; returns what happened, file by file.

    Raises ExportError (with the result so far) on the first file it cannot copy.
    """
    refusal = destination_refusal(task.org_id, dest, exporting=True)
    result = {
        "destination": dest,
        "workspace": task.workspace,
        "checked": 0,
        "copied": [],
        "unchanged": [],
        "kept": [],
        "skipped": [],
    }
    if refusal:
        result["refused"] = refusal[0]
        raise ExportError(refusal[1], result)
    found = scan(task.workspace)
    if not found.complete or found.unread:
        raise ExportError(
            f"The workspace holds more than {found.limit} entries (CONSOLE_WORKSPACE_MAX_ENTRIES) or a directory "
            "the console cannot read; nothing was copied, so the destination never holds part of it.",
            result,
        )
    # Directories are made with the files in them; every other kind is listed (a link is never followed).
    files = {k: e for k, e in found.entries.items() if e.kind != "dir"}
    result["checked"] = len(files)
    held: Path | None = None
    held_files: list[dict] = []
    try:
        os.makedirs(dest, exist_ok=True)
        if not os.path.isdir(dest) or os.path.islink(dest):
            raise ExportError(f"The export destination {dest} is not a directory.", result)
        for rel, entry in sorted(files.items()):
            if entry.kind != "file":
                result["skipped"].append({"path": wire(rel), "why": entry.kind, "link": payloads.encode(entry.link)})
                continue
            entry = replace(entry, sha256=file_sha(task.workspace, rel))
            there = file_entry(dest, rel)
            if there is not None and there.kind != "file":
                raise ExportError(
                    f"{shown(rel)}: the destination holds a symbolic link or special file there; it is never "
                    "followed or replaced.",
                    result,
                )
            if there is not None and there.sha256 == entry.sha256:
                result["unchanged"].append({"path": wire(rel), "sha256": entry.sha256})
                continue
            if there is not None:
                # Keep what the destination held before replacing it.
                if held is None:
                    held = _held_dir(task, "export")
                copy_file(dest, rel, held, rel)
                held_files.append({"path": wire(rel), "sha256": there.sha256, "size": there.size, "why": "replaced"})
                result["kept"].append(
                    {"path": wire(rel), "sha256": there.sha256, "copy": payloads.encode(str(held / name_of(rel)))}
                )
            after = copy_file(task.workspace, rel, dest, rel)
            check = file_entry(dest, rel)
            if after != entry.sha256 or check is None or check.sha256 != entry.sha256:
                raise ExportError(f"{shown(rel)}: the copy at the destination does not match the workspace.", result)
            result["copied"].append(
                {
                    "path": wire(rel),
                    "size": entry.size,
                    "before": there.sha256 if there else None,
                    "after": check.sha256,
                }
            )
    except OSError as exc:
        raise ExportError(os_error_words(exc, dest), result) from exc
    finally:
        if held is not None:
            result["held_copy"] = str(held)
            HeldCopy.objects.create(task=task, path=str(held), reason="export", files=held_files)
    return result


def _copy(task: Task) -> tuple[dict, bool, str]:
    """Copy the task's workspace to its destination: (result with counts, ok, error). Reads and writes files;
    called with nothing locked."""
    try:
        result = copy_workspace(task, task.export_destination)
        ok, error = True, ""
    except ExportError as exc:
        result, ok, error = exc.result, False, str(exc)
    counts = {k: len(result.get(k, [])) for k in ("copied", "unchanged", "kept", "skipped")}
    result["counts"] = {"checked": result.get("checked", 0), **counts}
    return result, ok, error[:5000]


def export_recorded(export: Export, *, actor, open_action: bool) -> None:
    """The event of a finished export and, for a failure (unless a repair is retrying), the `workspace_export`
    action of its run. In the transaction that records the outcome."""

    task, run = export.task, export.run
    event_append(
        org_id=task.org_id,
        task_id=task.pk,
        run_id=run.pk,
        kind="workspace_exported" if export.ok else "workspace_export_failed",
        actor=actor,
        payload={
            "export": export.pk,
            "destination": export.destination,
            "error": export.error[:500],
            **export.result["counts"],
        },
    )
    if not export.ok and open_action:
        action_open(
            run=Run.objects.select_related("task").get(pk=run.pk),
            kind=ActionKind.WORKSPACE_EXPORT,
            cause=EXPORT_FAILED,
            evidence={"error": export.error, "destination": export.destination, "export": export.pk, **export.result},
            recovery_owner="role:admin",
            actor=actor,
        )


def export_run(*, task: Task, run: Run, actor, repair=None, open_action: bool = True) -> Export:
    """Copy the workspace to the task's destination and record the outcome, in the caller's transaction (an
    admin's Retry export). A failure records the error and, unless `open_action` is off (a repair retrying),
    opens the `workspace_export` action of the run with it."""
    result, ok, error = _copy(task)
    export = Export.objects.create(
        task=task,
        run=run,
        destination=task.export_destination,
        ok=ok,
        error=error,
        result=result,
        repair=repair,
        finished_at=timezone.now(),
    )
    export_recorded(export, actor=actor, open_action=open_action)
    return export


def _stale_before():
    return timezone.now() - timedelta(seconds=settings.CONSOLE_EXPORT_STALE_SECONDS)


def runs_to_export():
    """Succeeded runs, the latest of their task, whose task has a destination, and that were never exported: no
    export of theirs finished or is being copied (a copy claimed longer ago than CONSOLE_EXPORT_STALE_SECONDS
    and never recorded was cut off, and is taken over)."""
    latest = Run.objects.filter(task=OuterRef("task")).order_by("-id").values("pk")[:1]
    taken = Export.objects.filter(run=OuterRef("pk")).filter(
        Q(finished_at__isnull=False) | Q(created_at__gte=_stale_before())
    )
    return (
        Run.objects.filter(status=RunStatus.SUCCEEDED)
        .exclude(task__export_destination="")
        .filter(pk=Subquery(latest))
        .exclude(Exists(taken))
        .order_by("id")
    )


@transaction.atomic
def export_claim(*, run_id: int, label: str) -> Export | None:
    """Take one run's export in a short transaction: an unfinished export row, or a stalled one taken over.
    None when another supervisor holds it or it was exported meanwhile."""
    qs = Run.objects.filter(pk=run_id)
    if connection.features.has_select_for_update_skip_locked:
        qs = qs.select_for_update(skip_locked=True, of=("self",))
    run = qs.select_related("task__org").first()
    if run is None or not runs_to_export().filter(pk=run.pk).exists():
        return None
    stalled = Export.objects.filter(run=run, finished_at__isnull=True).order_by("-id").first()
    if stalled is not None:
        now = timezone.now()
        taken = Export.objects.filter(pk=stalled.pk, finished_at__isnull=True, created_at=stalled.created_at)
        if taken.update(created_at=now, claimed_by=label, destination=run.task.export_destination) != 1:
            return None
        stalled.refresh_from_db()
        return stalled
    return Export.objects.create(
        task=run.task, run=run, destination=run.task.export_destination, ok=False, claimed_by=label
    )


def export_finish(*, export: Export, result: dict, ok: bool, error: str, actor) -> bool:
    """Record a claimed export's outcome in one transaction; False when the claim was taken over meanwhile (the
    copy that took it records instead)."""
    with transaction.atomic():
        mine = Export.objects.filter(pk=export.pk, finished_at__isnull=True, created_at=export.created_at)
        if mine.update(ok=ok, error=error, result=result, finished_at=timezone.now()) != 1:
            return False
        export.refresh_from_db()
        export_recorded(export, actor=actor, open_action=True)
    return True


def exports_run(limit: int = 20, *, label: str = "supervisor") -> list[int]:
    """Supervisor duty: export each run that succeeded and was not exported yet.

    Each export is claimed in one short transaction, copied with nothing locked and no transaction open (a
    large workspace holds no row and no pass of other work), and recorded in another.
    """
    done = []
    # A workspace a worker holds is exported by that worker (`export_job_claim`): the server never reads it.
    for run_id in list(runs_to_export().filter(task__workspace_label="").values_list("pk", flat=True)[:limit]):
        export = export_claim(run_id=run_id, label=label)
        if export is None:
            continue
        task = Task.objects.select_related("org").get(pk=export.task_id)
        result, ok, error = _copy(task)
        if export_finish(export=export, result=result, ok=ok, error=error, actor="supervisor"):
            done.append(export.pk)
    return done


# --- exports of a workspace a worker holds: jobs of the runner API -------------------------------------------


def export_job_claim(*, worker, label: str) -> dict | None:
    """The next export a worker serving `label` does on its own disk: a run of a task it holds that succeeded
    and was not exported (claimed as the supervisor claims one), or None. A destination the organization's
    export roots refuse is recorded as failed here, with the refusal, and never handed out."""
    runs = runs_to_export().filter(org_id=worker.org_id, task__workspace_label=label)
    for run_id in list(runs.values_list("pk", flat=True)[:5]):
        export = export_claim(run_id=run_id, label=f"{worker.name}/{label}"[:100])
        if export is None:
            continue
        task = Task.objects.select_related("org").get(pk=export.task_id)
        refusal = destination_refusal(task.org_id, export.destination, exporting=True)
        if refusal:
            result = {"destination": export.destination, "workspace": task.workspace_root, "checked": 0,
                      "refused": refusal[0], "counts": {"checked": 0}}  # fmt: skip
            export_finish(export=export, result=result, ok=False, error=refusal[1], actor=worker)
            continue
        return {
            "export": export.pk,
            "task": task.pk,
            "run": export.run_id,
            "org": task.org.slug,
            "workspace_key": task.workspace_key,
            "destination": export.destination,
            "hint": f"{timezone.now():%Y%m%d-%H%M%S}-export",
        }
    return None


LISTS = ("copied", "unchanged", "kept", "skipped")


def export_job_finish(*, worker, export_id: int, ok, result, error) -> Export:
    """Record what the worker's copy did, file by file, as the supervisor's copy is recorded (the event, and the
    `workspace_export` action on a failure). Only the worker that claimed it may; a second report of a finished
    export is answered with it."""
    export = Export.objects.select_related("task__org", "run").filter(pk=export_id, task__org_id=worker.org_id).first()
    if export is None or not export.claimed_by.startswith(f"{worker.name}/"):
        raise NotFound(f"No export #{export_id} claimed by this worker.")
    if export.finished_at is not None:
        return export
    if not isinstance(ok, bool) or not isinstance(result, dict):
        raise Invalid('The body must be {"ok": true|false, "result": {...}, "error"?: "..."}.')
    clean = {"destination": export.destination, "workspace": export.task.workspace_root, "workspace_on": "worker",
             "checked": result.get("checked") if isinstance(result.get("checked"), int) else 0}  # fmt: skip
    for name in LISTS:
        items = result.get(name) or []
        clean[name] = [i for i in items if isinstance(i, dict)][:10_000] if isinstance(items, list) else []
    clean["counts"] = {"checked": clean["checked"], **{k: len(clean[k]) for k in LISTS}}
    held = result.get("held_copy")
    if isinstance(held, str) and held:
        clean["held_copy"] = held[:1000]
    text = error if isinstance(error, str) else ""
    with transaction.atomic():
        if isinstance(held, str) and held:
            files = result.get("held_files") if isinstance(result.get("held_files"), list) else []
            HeldCopy.objects.create(task=export.task, path=held[:1000], reason="export", files=files[:10_000])
        if not export_finish(export=export, result=clean, ok=ok, error=text[:5000], actor=worker):
            raise NotEligible(f"Export #{export.pk} was taken over by another copy; this report was not recorded.")
    export.refresh_from_db()
    return export
