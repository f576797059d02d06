"""Workspace repairs (DESIGN §9): distinct admin paths, each bound to the exact action, run and version.

- reconcile: read the disk again and adopt into the manifest what only a
  person changed; a file the remaining plan also changes (or an older version,
  a link, a special file) is *held*: a copy is kept, it is listed, and the
  action stays open — the continuation waits for it;
- reissue: a fresh directory rebuilt from the manifest's recorded content; the
  old directory stays where it is, untouched, recorded as a held copy and
  linked; the task continues in the fresh one;
- retry_export: copy the workspace to the export destination again.

Each records its actual result (files checked, adopted, held, rebuilt, copied,
with hashes before and after) on a `Repair`, and the card shows that result.
No repair deletes a file or overwrites content that is not also kept.
Refused: without the admin role (403), a stale version or a confirmation for
another run (409 stale_version), an action that is no longer live (409 with
its reason), while any writer of the workspace holds a live lease (409
gate_closed `lease_live`).

When a worker holds the task's workspace on its own disk (`Task.workspace_label`), the server never opens it:
a reconcile or a reissue is queued as a repair job (status "queued", the workspace's label) for a worker holding
that workspace to do and report (recovery/workspaces/repair_jobs.py); the action changes only with that report.
One job at a time per action: another request while one is queued or claimed is refused (409 `repair_pending`).

A repair task (`action_repair_task`) is independent repair work: its own task,
owned by a chosen agent, working in the same workspace; the action waits with
that agent and returns to its return owner when the task is done.
"""

from pathlib import Path

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from recovery.action_log import action_change, action_check_version, action_locked, action_move
from recovery.models import LIVE_ACTION_STATUSES, ActionKind, ActionStatus, HeldCopy, RecoveryAction, Repair
from recovery.rules import workspace_diff as wd
from recovery.transitions import JOB_PENDING, JOB_QUEUED
from recovery.workspaces import validation as ws
from recovery.workspaces.exports import export_run
from tasks import services
from tasks.authz import require_role
from tasks.errors import GateClosed, Invalid, NotEligible, NotFound, StaleVersion
from tasks.export_roots import destination_refusal
from tasks.models import Agent, Membership, Role, Task, WorkspaceFile
from tasks.services import actor_label
from tasks.worker_workspaces import held_by_worker
from tasks.workspace import (
    DIR,
    FIFO,
    FILE,
    LINK,
    copy_file,
    make_entry,
    make_fresh_dir,
    manifest_rebuilt,
    manifest_record,
    name_of,
    shown,
    store_has,
    store_path,
    wire,
    write_file,
)
from tasks.workspace import _link_text as link_text

RECONCILE, REISSUE, RETRY_EXPORT = "reconcile", "reissue", "retry_export"
REPAIRS_FOR = {
    ActionKind.WORKSPACE_VALIDATION: (RECONCILE, REISSUE),
    ActionKind.WORKSPACE_EXPORT: (RETRY_EXPORT,),
}
RESOLUTION = {RECONCILE: "reconciled", REISSUE: "reissued", RETRY_EXPORT: "exported"}


def _side(entry: wd.Entry | None) -> dict | None:
    if entry is None:
        return None
    if entry.kind != FILE:
        side = {"kind": entry.kind}
        if entry.link is not None:
            side["link"] = ws.wire_text(entry.link)
        return side
    return {"sha256": entry.sha256, "size": entry.size}


def _refuse_unless_live(action: RecoveryAction) -> None:
    if action.status not in LIVE_ACTION_STATUSES:
        why = action.resolution_note or action.resolution or action.status
        raise NotEligible(
            f"Action #{action.pk} is {action.status} ({why}); nothing was repaired.",
            reason=action.status,
            current_version=action.version,
        )


def _refuse_while_pending(action: RecoveryAction) -> None:
    job = Repair.objects.filter(action=action, status__in=JOB_PENDING).order_by("id").first()
    if job is not None:
        waits = f"worker {job.claimed_by} is doing it" if job.claimed_by else "it waits for a worker holding it"
        raise NotEligible(
            f"Repair #{job.pk} ({job.repair}) of this workspace is {job.status}: {waits}. Nothing more was asked; "
            "its result comes first.",
            reason="repair_pending",
            repair=job.pk,
            current_version=action.version,
        )


def _refuse_while_writing(action: RecoveryAction) -> None:
    writer = ws.writer_runs_live(action.task)
    if writer is not None:
        raise GateClosed(
            f"Run #{writer.pk} holds a live lease until {writer.lease_expires_at:%Y-%m-%d %H:%M:%S} UTC and may "
            "still write in this workspace; nothing was repaired.",
            gate="lease_live",
            run=writer.pk,
            lifted_by="nobody: it ends when the worker finishes or its lease lapses",
        )


# --- the three repairs ------------------------------------------------------------------------


def _reconcile(action: RecoveryAction, repair_id_hint: str) -> tuple[dict, bool, HeldCopy | None]:
    task = action.task
    c = ws.compare_task(task)
    source = action.run.continues or action.run
    verdicts = wd.reconcile_plan(c.diffs, ws.remaining_steps(source))
    by_path = {d.path: d for d in c.diffs}
    adopt = [v.path for v in verdicts if v.action == wd.ADOPT]
    # One manifest update for everything adopted, from the disk as read ahead of this transaction.
    manifest_record(
        task=task,
        paths=[p for p in adopt if by_path[p].status != wd.MISSING],
        forget_missing=[p for p in adopt if by_path[p].status == wd.MISSING],
        source="reconcile",
        disk=ws.ahead_of(task),
    )
    after_rows = {r.path: r for r in WorkspaceFile.objects.filter(task=task, path__in=adopt)} if adopt else {}
    adopted, held = [], []
    held_dir: Path | None = None
    held_files = []
    for v in verdicts:
        d = by_path[v.path]
        if v.action == wd.ADOPT:
            row = after_rows.get(d.path)
            after = None
            if row is not None:
                after = (
                    {"sha256": row.sha256 or None, "size": row.size}
                    if row.kind == FILE
                    else {"kind": row.kind, **({"link": row.link} if row.link is not None else {})}
                )
            adopted.append({"path": wire(d.path), "status": d.status, "before": _side(d.recorded), "after": after})
            continue
        item = {"path": wire(d.path), "status": d.status, "reason": v.reason, "seqs": list(v.seqs)}
        item["before"] = _side(d.recorded)
        item["after"] = _side(d.actual) if d.actual is not None else None
        if d.actual is not None and d.actual.kind == "link":
            item["link"] = ws.wire_text(d.actual.link)
        if d.actual is not None and d.actual.kind == FILE:
            # A held file is copied; any other entry is listed as it is (a link with its target, never followed).
            if held_dir is None:
                held_dir = make_fresh_dir(Path(task.workspace).parent / f"task-{task.pk}.held", repair_id_hint)
            copied = copy_file(task.workspace, d.path, held_dir, d.path)
            item["copy"] = ws.wire_text(str(held_dir / name_of(d.path))) if copied else None
            held_files.append({"path": wire(d.path), "sha256": copied, "size": d.actual.size, "why": v.reason})
        held.append(item)
    copy = None
    if held_dir is not None:
        copy = HeldCopy.objects.create(task=task, path=str(held_dir), reason="reconcile", files=held_files)
    # The action's evidence becomes this reading: what still differs is what it held (what it adopted no longer
    # differs). The card and the panel then say the same thing, and no control offers to adopt an adopted file.
    remaining = [by_path[v.path] for v in verdicts if v.action != wd.ADOPT]
    action.evidence = {
        **(action.evidence or {}),
        **ws.evidence_for(task, remaining, c.rows, source=source, checked=len(c.diffs), disk=c.disk),
    }
    result = {
        "workspace": task.workspace,
        "checked": len(c.diffs),
        "adopted": adopted,
        "held": held,
        "held_copy": str(held_dir) if held_dir else None,
        "counts": {"checked": len(c.diffs), "adopted": len(adopted), "held": len(held)},
        **ws.walk_bounds(c.disk),
    }
    return result, not held, copy


# Kinds an isolated reissue makes again; a socket is made by the program that listens on it and a device node
# is never made by the console: their records are dropped from the manifest, and the result lists them.
REMADE = (LINK, DIR, FIFO)


def _reissue(action: RecoveryAction, repair_id_hint: str) -> tuple[dict, bool, HeldCopy | None]:
    task = action.task
    slug = task.org.slug
    rows = list(WorkspaceFile.objects.filter(task=task).order_by("path"))
    lost = [r.path for r in rows if r.kind == FILE and (not r.kept or not r.sha256 or not store_has(slug, r.sha256))]
    if lost:
        listed = [shown(p) for p in lost]
        named = ", ".join(listed[:5]) + (f" and {len(lost) - 5} more" if len(lost) > 5 else "")
        raise NotEligible(
            f"Isolated reissue cannot rebuild {len(lost)} file(s) whose recorded content was not kept ({named}); "
            "nothing was changed. Reconcile instead, or restore them by hand.",
            reason="content_not_kept",
            files=[wire(p) for p in lost[:100]],
        )
    c = ws.compare_task(task)
    old = task.workspace
    fresh = make_fresh_dir(Path(old).parent, f"task-{task.pk}.reissue")
    rebuilt, not_remade = [], []
    # Directories first would not matter (every write makes its parents); files before links, so that a link
    # into the workspace never stands where a file is written.
    for row in sorted(rows, key=lambda r: (r.kind != FILE, r.path)):
        if row.kind == FILE:
            with open(store_path(slug, row.sha256), "rb") as src:
                after = write_file(fresh, row.path, src, mtime_ns=row.mtime_ns, exclusive=True)
            if after != row.sha256:
                raise NotEligible(
                    f"{shown(row.path)}: the kept content no longer matches its hash; nothing was switched."
                )
            rebuilt.append({"path": wire(row.path), "before": row.sha256, "after": after, "size": row.size})
        elif row.kind in REMADE:
            make_entry(fresh, row.path, row.kind, link=link_text(row.link))
            rebuilt.append({"path": wire(row.path), "kind": row.kind, **({"link": row.link} if row.link else {})})
        else:
            not_remade.append({"path": wire(row.path), "kind": row.kind})
    Task.objects.filter(pk=task.pk).update(workspace=str(fresh), updated_at=timezone.now())
    kept = [
        {"path": wire(d.path), "status": d.status, "sha256": d.actual.sha256 if d.actual else None, "why": d.status}
        for d in c.diffs
        if d.status != wd.SAME
    ]
    copy = HeldCopy.objects.create(task=task, path=old, reason="reissue", files=kept)
    task.workspace = str(fresh)
    # The rebuilt entries are recorded as they are now (new inodes and ctimes, the same content and targets);
    # a socket or device that was not made again leaves the manifest.
    manifest_rebuilt(task=task, keys=[r.path for r in rows if r.kind == FILE or r.kind in REMADE])
    gone = [r.path for r in rows if r.kind not in REMADE and r.kind != FILE]
    if gone:
        WorkspaceFile.objects.filter(task=task, path__in=gone).delete()
    result = {
        "workspace": str(fresh),
        "old_workspace": old,
        "checked": len(c.diffs),
        "rebuilt": rebuilt,
        "not_remade": not_remade,
        "kept_differences": kept,
        "held_copy": old,
        "counts": {"checked": len(c.diffs), "rebuilt": len(rebuilt), "kept": len(kept), "not_remade": len(not_remade)},
    }
    return result, True, copy


def _retry_export(action: RecoveryAction, user) -> tuple[dict, bool, HeldCopy | None]:
    export = export_run(task=action.task, run=action.run, actor=user, open_action=False)
    result = {**export.result, "ok": export.ok, "error": export.error or None, "export": export.pk}
    return result, export.ok, None


# --- the service --------------------------------------------------------------------------------


def action_repair(*, action_id: int, user, version, repair: str, run: int | None = None) -> Repair:
    """Carry out one repair on a live workspace action (admin), and record its actual result.

    A complete repair resolves the action (open → resolved) and lifts the
    workspace hold; a reconcile that held files keeps it open (the result lists
    them), and a retry export that failed again keeps it open with the new error.
    The workspace is read before the repair's transaction (content is never
    hashed while the action is locked); the repair itself compares that reading.
    A workspace a worker holds is never read: its reconcile or reissue is
    returned queued (a repair job, `result` None) and done by that worker.
    """
    with ws.read_ahead_for_action(action_id, user):
        return _action_repair(action_id=action_id, user=user, version=version, repair=repair, run=run)


@transaction.atomic
def _action_repair(*, action_id: int, user, version, repair: str, run: int | None = None) -> Repair:
    action = action_locked(action_id, user)
    require_role(user, action.org_id, Role.ADMIN)
    action = RecoveryAction.objects.select_related("task__org", "run__continues", "original_owner").get(pk=action.pk)
    _refuse_unless_live(action)
    action_check_version(action, version)
    if run is not None and run != action.run_id:
        raise StaleVersion(
            f"This confirmation was for run #{run}; recovery action #{action.pk} is about run #{action.run_id}.",
            current_version=action.version,
            status=action.status,
        )
    allowed = REPAIRS_FOR.get(action.kind, ())
    if repair not in allowed:
        raise Invalid(
            f"A {action.kind.replace('_', ' ')} action takes {' or '.join(allowed) or 'no repair'}, not {repair!r}.",
            field="repair",
        )
    _refuse_while_pending(action)
    _refuse_while_writing(action)
    if held_by_worker(action.task):
        if repair == RETRY_EXPORT:
            refusal = destination_refusal(action.task.org_id, action.task.export_destination, exporting=True)
            if refusal:
                raise NotEligible(f"{refusal[1]} Nothing was queued.", reason=refusal[0])
        return _queue_job(action, user, repair)
    hint = f"{timezone.now():%Y%m%d-%H%M%S}-{repair}"
    if repair == RECONCILE:
        result, complete, copy = _reconcile(action, hint)
    elif repair == REISSUE:
        result, complete, copy = _reissue(action, hint)
    else:
        result, complete, copy = _retry_export(action, user)
    now = timezone.now()
    state = "done" if complete else ("held" if repair == RECONCILE else "failed")
    row = Repair.objects.create(
        action=action, repair=repair, requested_by=user, status=state, result=result, completed_at=now
    )
    if copy is not None:
        HeldCopy.objects.filter(pk=copy.pk).update(repair=row)
    payload = {"repair": row.pk, "name": repair, "counts": result.get("counts", {}), "outcome": state}
    if complete:
        action_move(
            action,
            ActionStatus.RESOLVED,
            actor=user,
            kind="action_resolved",
            payload={**payload, "resolution": RESOLUTION[repair]},
            resolution=RESOLUTION[repair],
            resolution_note="",
            closed_at=now,
            closed_by=actor_label(user),
            recovery_owner="",
        )
    else:
        action_change(action, actor=user, kind="action_repaired", payload=payload, evidence=action.evidence)
    return row


def _queue_job(action: RecoveryAction, user, repair: str) -> Repair:
    """The repair as a job for a worker holding the workspace (in the caller's transaction): nothing is read or
    changed on any disk here, and the action stays as it is until the worker's result (repair_jobs.repair_report).
    The event changes the card (it now says it waits for a worker) and its version."""
    label = action.task.workspace_label
    row = Repair.objects.create(action=action, repair=repair, requested_by=user, status=JOB_QUEUED, label=label)
    action_change(
        action,
        actor=user,
        kind="action_repair_queued",
        payload={"repair": row.pk, "name": repair, "label": label, "outcome": JOB_QUEUED},
    )
    return row


# --- repair task and return owner ---------------------------------------------------------------------


def _return_owner(org_id: int, user, value: str) -> str:
    value = (value or "").strip()
    if not value:
        return f"user:{actor_label(user)}"
    if value == "role:admin":
        return value
    name = value.removeprefix("user:")
    person = get_user_model().objects.filter(username=name).first()
    if person is None or not Membership.objects.filter(user=person, org_id=org_id, role=Role.ADMIN).exists():
        raise Invalid(
            f"The return owner must be an admin of this organization (a username) or role:admin, not {value!r}.",
            field="return_owner",
        )
    return f"user:{name}"


@transaction.atomic
def action_repair_task(
    *, action_id: int, user, agent: str, title: str = "", return_owner: str = "", input: dict | None = None
) -> Task:
    """Open independent repair work as its own task (admin): owned by `agent`, in the same workspace.

    The action waits with that agent (`recovery_owner` `agent:<name>`) and
    returns to `return_owner` (default: the admin) when the repair task is done.
    Refused for an action that is not a live workspace action, or that already
    has an open repair task.
    """
    action = action_locked(action_id, user)
    require_role(user, action.org_id, Role.ADMIN)
    action = RecoveryAction.objects.select_related("task__org", "repair_task").get(pk=action.pk)
    _refuse_unless_live(action)
    if action.kind not in REPAIRS_FOR:
        raise NotEligible("Only a workspace action takes a repair task.", reason="not_workspace")
    if action.repair_task is not None and action.repair_task.status not in ("done", "cancelled"):
        raise NotEligible(
            f"Repair task #{action.repair_task_id} is still open for this action.", repair_task=action.repair_task_id
        )
    if not isinstance(agent, str) or not Agent.objects.filter(org_id=action.org_id, name=agent).exists():
        raise NotFound(f"No agent named {agent!r} in this organization.", field="agent")
    owner = _return_owner(action.org_id, user, return_owner)
    source = action.task
    task = services.task_create(
        org=source.org,
        actor=user,
        creator=user,
        title=(title or "").strip() or f"Repair the workspace of task #{source.pk}",
        agent=agent,
        input=input if input is not None else {"steps": []},
        private=source.private,
    )
    # The repair works on the files it repairs: the source task's workspace.
    # A workspace a worker holds stays with the workers of its label, at its key there.
    Task.objects.filter(pk=task.pk).update(
        workspace=source.workspace,
        workspace_label=source.workspace_label,
        workspace_key=source.workspace_key or (services.workspace_key_of(source) if source.workspace_label else ""),
        workspace_root=source.workspace_root,
    )
    action_change(
        action,
        actor=user,
        kind="action_repair_task_opened",
        payload={"repair_task": task.pk, "agent": agent, "return_owner": owner},
        repair_task=task,
        return_owner=owner,
        recovery_owner=f"agent:{agent}",
    )
    task.refresh_from_db()
    return task


def repair_task_done(task_id: int, *, actor="system") -> list[int]:
    """The repair task is done: its live actions return to their return owner (in the caller's transaction)."""
    returned = []
    for action in RecoveryAction.objects.filter(repair_task_id=task_id, status__in=LIVE_ACTION_STATUSES):
        if not action.return_owner or action.recovery_owner == action.return_owner:
            continue
        if action_change(
            action,
            actor=actor,
            kind="action_returned",
            payload={"repair_task": task_id, "return_owner": action.return_owner},
            strict=False,
            recovery_owner=action.return_owner,
        ):
            returned.append(action.pk)
    return returned
