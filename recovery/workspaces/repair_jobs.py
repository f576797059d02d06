"""Repair jobs (DESIGN §9, workers anywhere): a workspace repair done by the worker that holds the workspace.

An admin's reconcile or reissue of a workspace a worker holds on its own disk is queued, not done
(recovery/workspaces/repairs.py). A worker started with `CONSOLE_WORKER_WORKSPACES` asks for the jobs of its label
(`repair_claim`: the oldest of its organization, or one whose claimer went silent for a lease), does the repair on
its disk with the manifest and the remaining plan it is handed (`job_data`), and reports what it did
(`repair_report`). The report is applied in one transaction with the action locked: the manifest, the held copy,
the action's evidence and resolution, the worker's report, the job's final status. The server stores what the
worker says it did and never opens that disk.
"""

import hashlib
import json
from datetime import datetime, timedelta

from django.conf import settings
from django.core.cache import cache
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from recovery.action_log import action_change, action_event, action_move
from recovery.models import LIVE_ACTION_STATUSES, ActionStatus, Export, HeldCopy, RecoveryAction, Repair
from recovery.rules import workspace_diff as wd
from recovery.transitions import JOB_CLAIMED, JOB_PENDING, JOB_QUEUED, REPAIRS
from recovery.workspaces.exports import export_recorded
from recovery.workspaces.repairs import RECONCILE, REISSUE, RESOLUTION, RETRY_EXPORT
from recovery.workspaces.reports import clean_report
from recovery.workspaces.reports import evidence_of as reported_evidence
from recovery.workspaces.validation import remaining_steps
from tasks.errors import Invalid, NotEligible, NotFound
from tasks.models import Task, Worker, WorkspaceFile, WorkspaceReport
from tasks.services import actor_label
from tasks.worker_instances import LIST_WINDOW, instance_seen
from tasks.worker_workspaces import MAX_ENTRIES, clean_entries, clean_entry, manifest_apply, manifest_wire
from tasks.workspace import UnsafePath, clean_relpath, step_paths, wire

DIFF_STATUSES = (wd.CHANGED, wd.ADDED, wd.MISSING)
MAX_TEXT = 1000  # characters of a path on the worker (HeldCopy.path, Task.workspace_root)


def silent_after() -> timedelta:
    """A claimer that has not reported for a lease is taken as gone: another worker of the label may take the job."""
    return timedelta(seconds=settings.CONSOLE_LEASE_SECONDS)


def claimer(worker: Worker, instance: str) -> str:
    """Who holds a job: the worker's name and the instance label it claims with (as a run's lease owner)."""
    return f"{worker.name}/{instance}"[:200]


# --- who asks for the jobs of a label ------------------------------------------------------------


def _poll_key(org_id: int, label: str) -> str:
    return f"repair-polls:{org_id}:{hashlib.sha256(label.encode()).hexdigest()}"


def label_polled(*, worker: Worker, instance: str, label: str, now: datetime) -> None:
    """A worker holding workspaces labelled `label` asked for repair work. Bookkeeping (like worker instances, no
    Event), kept in the shared cache: a card whose job waits for that label says whether any worker asks for it."""
    cache.set(
        _poll_key(worker.org_id, label),
        {"at": now.isoformat(), "by": claimer(worker, instance)},
        timeout=int(LIST_WINDOW.total_seconds()),
    )


def label_last_polled(org_id: int, label: str) -> tuple[datetime, str] | None:
    """When a worker of `label` last asked for repair work (within a day), and which one; None if none did."""
    seen = cache.get(_poll_key(org_id, label))
    if not isinstance(seen, dict):
        return None
    try:
        return datetime.fromisoformat(seen["at"]), str(seen["by"])
    except (KeyError, TypeError, ValueError):
        return None


# --- claim ---------------------------------------------------------------------------------


@transaction.atomic
def repair_claim(*, worker: Worker, instance: str, label: str) -> Repair | None:
    """The oldest repair job of the worker's organization for workspaces labelled `label`, claimed for `instance`:
    a queued one, or one whose claimer went silent (claimed longer than a lease ago). None when there is none.

    Two claimers never take one job: on PostgreSQL a claim skips a job another claim holds locked, and on both
    databases the move is a compare-and-set from the status and claim time it read. A job whose action closed
    before a worker took it ends failed on the way (it would repair nothing). The poll is recorded either way
    (the workers page; a waiting card's "no worker of this label asks").
    """
    now = timezone.now()
    instance_seen(worker=worker, label=instance, claimed=False, now=now)
    label_polled(worker=worker, instance=instance, label=label, now=now)
    me = claimer(worker, instance)
    qs = (
        Repair.objects.filter(action__org_id=worker.org_id, label=label)
        .filter(Q(status=JOB_QUEUED) | Q(status=JOB_CLAIMED, claimed_at__lt=now - silent_after()))
        .select_related("action")
        .order_by("created_at", "id")
    )
    if connection.features.has_select_for_update_skip_locked:
        qs = qs.select_for_update(skip_locked=True, of=("self",))
    for job in qs[:20]:
        action = job.action
        mine = {"expect": job.status, "where": {"claimed_at": job.claimed_at}, "strict": False, "obj": job}
        if action.status not in LIVE_ACTION_STATUSES:
            why = action.resolution_note or action.resolution or action.status
            error = {"code": "action_closed", "detail": f"Action #{action.pk} was {action.status} ({why}) first."}
            REPAIRS.move(job.pk, "failed", **mine, result={"error": error}, completed_at=now)
            continue
        event = action_event(
            action,
            "action_repair_claimed",
            worker,
            status=action.status,
            repair=job.pk,
            name=job.repair,
            worker=me,
            taken_over_from=job.claimed_by or None,
        )
        if REPAIRS.move(job.pk, JOB_CLAIMED, **mine, event=event, claimed_by=me, claimed_at=now):
            return job
    return None


def job_data(job: Repair) -> dict:
    """A claimed job as the worker gets it (spec: repair jobs): the manifest, and the remaining plan's steps with
    the paths each changes (`all`: it may change any, a bash command) — what a reconcile must hold."""
    action = RecoveryAction.objects.select_related("task__org", "run__continues").get(pk=job.action_id)
    task = action.task
    source = action.run.continues or action.run
    plan = []
    for step in remaining_steps(source):
        paths, everything = step_paths(step.tool, step.args)
        plan.append({"seq": step.seq, "tool": step.tool, "paths": [wire(p) for p in paths], "all": everything})
    return {
        "repair": job.pk,
        "kind": job.repair,
        "task": task.pk,
        "org": task.org.slug,
        "workspace_key": task.workspace_key,
        "hint": f"{job.claimed_at:%Y%m%d-%H%M%S}-{job.repair}",
        "manifest": manifest_wire(task),
        "plan": plan,
        **({"destination": task.export_destination} if job.repair == RETRY_EXPORT else {}),
    }


# --- the worker's result: checked -------------------------------------------------------------------


def _list(value, where: str, limit: int = MAX_ENTRIES) -> list:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > limit:
        raise Invalid(f"`{where}` must be a list of at most {limit} items.", field=where)
    return value


def _dict(value, where: str) -> dict:
    if not isinstance(value, dict):
        raise Invalid(f"`{where}` must be an object.", field=where)
    return value


def _key(value, where: str) -> str:
    try:
        return clean_relpath(value)
    except UnsafePath as exc:
        raise Invalid(f"`{where}` names a path that is not inside the workspace: {exc}", field=where) from exc


def _status(value, where: str) -> str:
    if value not in DIFF_STATUSES:
        raise Invalid(f"`{where}`: status must be one of {', '.join(DIFF_STATUSES)}.", field=where)
    return value


def _entry(value, where: str) -> dict | None:
    return None if value is None else clean_entry(value, where)[1]


def _text(value, where: str, *, required: bool = False) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT:
        raise Invalid(f"`{where}` must be a path of at most {MAX_TEXT} characters.", field=where)
    return value


def _count(value, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise Invalid(f"`{where}` must be a whole number from 0.", field=where)
    return value


def _seqs(value, where: str) -> list[int]:
    seqs = _list(value, where)
    if not all(isinstance(s, int) and not isinstance(s, bool) for s in seqs):
        raise Invalid(f"`{where}` must list step numbers.", field=where)
    return seqs


def _error(value) -> dict:
    """A worker's `error` ({"code", "detail", "files"?}) as it is kept: code and detail as text, files as paths."""
    error = value if isinstance(value, dict) else {}
    code, detail = error.get("code"), error.get("detail")
    out = {
        "code": code[:64] if isinstance(code, str) and code else "repair_failed",
        "detail": detail[:2000] if isinstance(detail, str) else "",
    }
    if error.get("files") is not None:
        out["files"] = [wire(_key(p, "error.files")) for p in _list(error["files"], "error.files", 100)]
    return out


def _fingerprint(ok: bool, result, error) -> str:
    body = json.dumps({"ok": ok, "result": result, "error": error}, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(body.encode()).hexdigest()


# --- the worker's result: applied ------------------------------------------------------------------


def _reconcile_reported(action: RecoveryAction, result: dict, me: str, job=None) -> tuple[dict, bool, dict, list]:
    """Apply a reconcile's report: what it adopted goes into the manifest (source "reconcile"; what it adopted
    as missing leaves it), and what it held becomes the action's evidence. Returns (the result kept, complete,
    the held copy's fields or None, the remaining items for the worker's report)."""
    task = action.task
    root = _text(result.get("root"), "result.root")
    checked = _count(result.get("checked", 0), "result.checked")
    entries, gone, adopted = {}, [], []
    for item in _list(result.get("adopted"), "result.adopted"):
        item = _dict(item, "result.adopted")
        key, status = _key(item.get("path"), "result.adopted"), _status(item.get("status"), "result.adopted")
        after = _entry(item.get("after"), "result.adopted")
        if status == wd.MISSING:
            gone.append(key)
        elif after is None:
            raise Invalid("`result.adopted`: an entry adopted from disk comes with its `after` entry.", field="result")
        else:
            entries[key] = after
        adopted.append(
            {
                "path": wire(key),
                "status": status,
                "before": _entry(item.get("before"), "result.adopted"),
                "after": after,
            }
        )
    held = []
    for item in _list(result.get("held"), "result.held"):
        item = _dict(item, "result.held")
        key = _key(item.get("path"), "result.held")
        reason = item.get("reason")
        held.append(
            {
                "path": wire(key),
                "status": _status(item.get("status"), "result.held"),
                "reason": reason if isinstance(reason, str) else "",
                "seqs": _seqs(item.get("seqs"), "result.held"),
                "before": _entry(item.get("before"), "result.held"),
                "after": _entry(item.get("after"), "result.held"),
                "copy": _text(item.get("copy"), "result.held"),
            }
        )
    held_copy = _text(result.get("held_copy"), "result.held_copy")
    held_files = [_dict(f, "result.held_files") for f in _list(result.get("held_files"), "result.held_files")]
    # What still differs is what it held (what it adopted no longer differs): the worker's validation items of
    # them, checked whole before anything is written, become the action's evidence as a validation's would.
    remaining = clean_report(
        {"files": _list(result.get("remaining"), "result.remaining"), "checked": checked, "root": root or ""}
    )
    source = action.run.continues or action.run
    evidence = reported_evidence(task, source, remaining["items"], {**remaining, "label": task.workspace_label}, me)

    manifest_apply(task=task, entries=entries, gone=gone, source="reconcile")
    if root and root != task.workspace_root:
        Task.objects.filter(pk=task.pk).update(workspace_root=root)
    action.evidence = {**(action.evidence or {}), **evidence}
    kept = {
        "worker": me,
        "workspace": root or task.workspace_root,
        "checked": checked,
        "adopted": adopted,
        "held": held,
        "held_copy": held_copy,
        "counts": {"checked": checked, "adopted": len(adopted), "held": len(held)},
    }
    copy = {"reason": "reconcile", "path": held_copy, "files": held_files} if held_copy else None
    return kept, not held, copy, list(remaining["items"].values())


def _workspace_key(value, org_slug: str) -> str:
    """A reissue's new key: relative, plain components, under the organization (as the claim hands it out)."""
    key = value if isinstance(value, str) else ""
    parts = key.split("/")
    if (
        len(key) > 300
        or len(parts) < 2
        or parts[0] != org_slug
        or any(p in ("", ".", "..") or "\x00" in p for p in parts)
    ):
        raise Invalid(
            f"`result.workspace_key` must be a relative path of plain names under {org_slug!r}.", field="result"
        )
    return key


def _rebuilt(item) -> dict:
    """One entry a reissue made again, as the card lists a rebuild: a file with its content's hash before (the
    record) and after (what was written: the worker checked they are equal), anything else as what it is."""
    item = _dict(item, "result.rebuilt")
    path = wire(_key(item.get("path"), "result.rebuilt"))
    kind = item.get("kind") or "file"
    if kind != "file":
        return {"path": path, "kind": str(kind), **({"link": item["link"]} if item.get("link") is not None else {})}
    sha = item.get("sha256")
    return {"path": path, "before": sha, "after": sha, "size": item.get("size")}


def _reissue_reported(action: RecoveryAction, result: dict, me: str, job=None) -> tuple[dict, bool, dict, list]:
    """Apply a reissue's report: the task continues in the fresh directory (its key and the worker's path), each
    manifest entry the worker rebuilt is recorded with its new identity (content, targets and writers stay as
    recorded: the rebuild wrote exactly those), and an entry it did not make again (a socket, a device) leaves the
    manifest. The old directory, untouched on the worker, is the held copy."""
    task = action.task
    root = _text(result.get("root"), "result.root", required=True)
    key = _workspace_key(result.get("workspace_key"), task.org.slug)
    old_root = _text(result.get("old_root"), "result.old_root", required=True)
    checked = _count(result.get("checked", 0), "result.checked")
    entries = clean_entries(result.get("entries"), "result.entries")
    rebuilt = [_rebuilt(item) for item in _list(result.get("rebuilt"), "result.rebuilt")]
    not_remade = _list(result.get("not_remade"), "result.not_remade")
    kept_differences = _list(result.get("kept_differences"), "result.kept_differences")
    for item in (*not_remade, *kept_differences):
        _key(_dict(item, "result").get("path"), "result")

    Task.objects.filter(pk=task.pk).update(workspace_key=key, workspace_root=root, updated_at=timezone.now())
    now = timezone.now()
    recorded = set(WorkspaceFile.objects.filter(task=task).values_list("path", flat=True))
    again = [
        WorkspaceFile(
            task=task, path=k, kind=e["kind"], size=e["size"], mtime_ns=e["mtime_ns"], ctime_ns=e["ctime_ns"],
            ino=e["ino"], recorded_at=now,
        )
        for k, e in entries.items()
        if k in recorded
    ]  # fmt: skip
    if again:
        WorkspaceFile.objects.bulk_create(
            again,
            batch_size=500,
            update_conflicts=True,
            unique_fields=["task", "path"],
            update_fields=["size", "mtime_ns", "ctime_ns", "ino", "recorded_at"],
        )
    manifest_apply(task=task, entries={}, gone=sorted(recorded - set(entries)))
    kept = {
        "worker": me,
        "workspace": root,
        "workspace_key": key,
        "old_workspace": old_root,
        "checked": checked,
        "rebuilt": rebuilt,
        "not_remade": not_remade,
        "kept_differences": kept_differences,
        "held_copy": old_root,
        "counts": {
            "checked": checked,
            "rebuilt": len(rebuilt),
            "kept": len(kept_differences),
            "not_remade": len(not_remade),
        },
    }
    return kept, True, {"reason": "reissue", "path": old_root, "files": kept_differences}, []


EXPORT_LISTS = ("copied", "unchanged", "kept", "skipped")


def _export_recorded(action: RecoveryAction, job: Repair, me: str, *, ok: bool, result: dict, error: str) -> Export:
    """The export a retry job copied on the worker, recorded as an export of the action's run (the task panel's
    last export, the event); the action is the repair's to settle, so no new export action opens."""
    task = action.task
    export = Export.objects.create(
        task=task, run=action.run, destination=task.export_destination, ok=ok, error=error[:5000],
        result=result, repair=job, claimed_by=me[:200], finished_at=timezone.now(),
    )  # fmt: skip
    export_recorded(export, actor=me, open_action=False)
    return export


def _export_reported(action: RecoveryAction, result: dict, me: str, job: Repair) -> tuple[dict, bool, dict, list]:
    """A retry export the worker did: every file copied, unchanged, kept (replaced after a copy) or skipped."""
    clean = {"destination": action.task.export_destination, "workspace": action.task.workspace_root,
             "checked": _count(result.get("checked", 0), "checked")}  # fmt: skip
    for name in EXPORT_LISTS:
        clean[name] = [i for i in _list(result.get(name) or [], name) if isinstance(i, dict)]
    clean["counts"] = {"checked": clean["checked"], **{k: len(clean[k]) for k in EXPORT_LISTS}}
    held = _text(result.get("held_copy"), "held_copy")
    if held:
        clean["held_copy"] = held
    export = _export_recorded(action, job, me, ok=True, result=clean, error="")
    kept = {**clean, "ok": True, "export": export.pk, "worker": me}
    copy = None
    if held:
        copy = {"path": held, "reason": "export", "files": _list(result.get("held_files") or [], "held_files")}
    return kept, True, copy, []


def _finish(job: Repair, to: str, me: str, result: dict) -> None:
    REPAIRS.move(
        job.pk, to, expect=JOB_CLAIMED, where={"claimed_by": me}, obj=job, result=result, completed_at=timezone.now()
    )


def repair_report(*, worker: Worker, instance: str, repair_id: int, ok: bool, result=None, error=None) -> Repair:
    """Record what the worker holding a job did, in one transaction with its action locked; returns the job.

    Only the claimer may report (the same organization, worker and instance label; 409 `not_claimer` for anyone
    else, a worker that took over included). The same report again is answered with the saved job; another one
    is 409 `already_reported`. Applied only to a live action: a report for an action that closed meanwhile is
    kept on the job, failed (`action_closed`), and changes nothing else. `ok` false: the job failed with the
    worker's error and the action stays open for another repair. A reconcile that held nothing and a reissue
    resolve the action ("reconciled", "reissued"); a reconcile that held files keeps it open with them as its
    evidence. A malformed result is Invalid (400) and saves nothing.
    """
    me = claimer(worker, instance)
    fingerprint = _fingerprint(ok, result, error)
    with transaction.atomic():
        found = Repair.objects.filter(pk=repair_id, action__org_id=worker.org_id).values_list("action_id").first()
        if found is None:
            raise NotFound(f"No repair job #{repair_id}.")
        action = (
            RecoveryAction.objects.select_for_update(of=("self",))
            .select_related("task__org", "run__continues")
            .get(pk=found[0])
        )
        job = Repair.objects.select_for_update(of=("self",)).select_related("requested_by").get(pk=repair_id)
        if job.claimed_by != me:
            raise NotEligible(
                f"Repair job #{job.pk} is {job.status}"
                + (f", claimed by {job.claimed_by}" if job.claimed_by else "")
                + f"; {me} may not report it.",
                reason="not_claimer",
                status=job.status,
            )
        if job.status not in JOB_PENDING:
            if (job.result or {}).get("report_sha256") == fingerprint:
                return job
            raise NotEligible(
                f"Repair job #{job.pk} was reported already ({job.status}); this report differs and was not saved.",
                reason="already_reported",
                status=job.status,
            )
        if action.status not in LIVE_ACTION_STATUSES:
            why = action.resolution_note or action.resolution or action.status
            closed = {"code": "action_closed", "detail": f"Action #{action.pk} was {action.status} ({why}) first."}
            reported = {"ok": ok, "result": result, "error": error}
            _finish(
                job, "failed", me, {"error": closed, "worker": me, "reported": reported, "report_sha256": fingerprint}
            )
            return job
        if not ok:
            failed = {"error": _error(error), "worker": me, "report_sha256": fingerprint}
            if job.repair == RETRY_EXPORT:
                export = _export_recorded(action, job, me, ok=False, result={}, error=failed["error"]["detail"])
                failed.update(export=export.pk, destination=export.destination)
            _finish(job, "failed", me, failed)
            payload = {"repair": job.pk, "name": job.repair, "outcome": "failed", "error": failed["error"]["code"]}
            action_change(action, actor=worker, kind="action_repaired", payload=payload)
            return job
        apply = {RECONCILE: _reconcile_reported, REISSUE: _reissue_reported, RETRY_EXPORT: _export_reported}
        kept, complete, copy, remaining = apply[job.repair](action, _dict(result, "result"), me, job)
        state = "done" if complete else "held"
        _finish(job, state, me, {**kept, "report_sha256": fingerprint})
        if copy is not None:
            HeldCopy.objects.create(task=action.task, repair=job, **copy)
        WorkspaceReport.objects.create(
            task=action.task,
            run_id=action.run_id,
            kind="repair",
            worker=me,
            label=job.label,
            root=kept["workspace"] or "",
            checked=kept["checked"],
            files=remaining,
        )
        payload = {"repair": job.pk, "name": job.repair, "counts": kept["counts"], "outcome": state, "worker": me}
        if complete:
            resolution = RESOLUTION[job.repair]
            action_move(
                action,
                ActionStatus.RESOLVED,
                actor=worker,
                kind="action_resolved",
                payload={**payload, "resolution": resolution},
                resolution=resolution,
                resolution_note="",
                closed_at=timezone.now(),
                closed_by=actor_label(job.requested_by) if job.requested_by else me,
                recovery_owner="",
            )
        else:
            action_change(action, actor=worker, kind="action_repaired", payload=payload, evidence=action.evidence)
        return job
