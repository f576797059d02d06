"""A worker's validation of a workspace it holds, before a continuation runs anything (workers anywhere, DESIGN §9).

The server cannot see a workspace a worker holds on its own disk, so the
continuation is not validated when it is created: its claim hands the worker
the manifest, and the worker compares its disk with it and reports each
difference (recorded and actual entry, a text diff of small text files) before
running anything. The report is kept (`WorkspaceReport`). No difference: the
continuation starts now (its attempt and action settle here). A difference the
plan does not explain: the run is refused exactly as one refused at admission
— it ends `failed` with `workspace_validation_failed`, never started, and a
`workspace_validation` action lists each file with the same evidence and words.
"""

from django.db import transaction

from recovery.action_log import action_open
from recovery.models import ActionKind
from recovery.rules import workspace_diff as wd
from recovery.workspaces import validation as ws
from tasks import services
from tasks.errors import Invalid, NotEligible
from tasks.models import WORKSPACE_VALIDATION_FAILED, Run, Task, Worker, WorkspaceFile, WorkspaceReport
from tasks.worker_workspaces import clean_entry, manifest_apply, side_of
from tasks.workspace import UnsafePath, clean_relpath, shown

STATUSES = (wd.CHANGED, wd.ADDED, wd.MISSING)
DIFF_NOTES = ("binary_or_large", "not_kept", "link", "special")
MAX_FILES = 10_000
MAX_DIFF = 256 * 1024  # characters of one file's diff kept as evidence


def _item(raw) -> tuple[str, dict]:
    if not isinstance(raw, dict):
        raise Invalid("`files` must hold objects.", field="files")
    try:
        key = clean_relpath(raw.get("path"))
    except UnsafePath as exc:
        raise Invalid(f"`files` names a path that is not inside the workspace: {exc}", field="files") from exc
    status = raw.get("status")
    if status not in STATUSES:
        raise Invalid(f"`files`: status must be one of {', '.join(STATUSES)}.", field="files")
    recorded = clean_entry(raw["recorded"], "files")[1] if raw.get("recorded") is not None else None
    actual = clean_entry(raw["actual"], "files")[1] if raw.get("actual") is not None else None
    if (status == wd.ADDED) != (recorded is None) or (status == wd.MISSING) != (actual is None):
        raise Invalid(f"`files`: a {status} entry has {'no' if status == wd.ADDED else 'a'} recorded side.",
                      field="files")  # fmt: skip
    diff = raw.get("diff")
    if diff is not None and not isinstance(diff, str):
        raise Invalid("`files`: diff must be text or null.", field="files")
    note = raw.get("diff_note")
    item = {"path": raw.get("path"), "status": status, "recorded": recorded, "actual": actual,
            "diff": diff[:MAX_DIFF] if diff else None}  # fmt: skip
    if note in DIFF_NOTES:
        item["diff_note"] = note
    return key, item


def clean_report(body) -> dict:
    """A worker's validation report checked whole (Invalid before anything is saved)."""
    if not isinstance(body, dict):
        raise Invalid('The body must be {"epoch", "root", "label", "checked", "complete", "files"}.')
    files = body.get("files")
    if not isinstance(files, list) or len(files) > MAX_FILES:
        raise Invalid(f"`files` must be a list of at most {MAX_FILES} differences.", field="files")
    checked = body.get("checked", 0)
    if not isinstance(checked, int) or isinstance(checked, bool) or checked < 0:
        raise Invalid("`checked` must be a whole number from 0.", field="checked")
    root, label = body.get("root", ""), body.get("label", "")
    if not isinstance(root, str) or len(root) > 1000 or not isinstance(label, str) or len(label) > 100:
        raise Invalid("`root` and `label` must be text.", field="root")
    items = dict(_item(f) for f in files)
    more = body.get("more", 0)
    return {
        "items": items,
        "checked": max(checked, len(items)),
        "complete": body.get("complete", True) is not False,
        "more": more if isinstance(more, int) and not isinstance(more, bool) and more > 0 else 0,
        "root": root,
        "label": label,
    }


def evidence_of(task: Task, source: Run, items: dict[str, dict], report: dict, owner: str) -> dict:
    """The action's evidence from the worker's report, in the shape the server's own validation gives."""
    steps = ws.remaining_steps(source)
    rows = {r.path: r for r in WorkspaceFile.objects.filter(task=task, path__in=list(items)[: ws.EVIDENCE_FILES])}
    files = []
    for key, item in list(items.items())[: ws.EVIDENCE_FILES]:
        recorded = side_of(item["recorded"])
        row = rows.get(key)
        if recorded is not None and row is not None:
            recorded.update({"run": row.run_id_seen, "seq": row.seq, "tool": row.tool, "source": row.source})
        entry = {
            "path": item["path"],
            "status": item["status"],
            "recorded": recorded,
            "actual": side_of(item["actual"]),
            "plan": wd.plan_touches(key, steps),
            "diff": item["diff"],
        }
        if item["diff"] is None:
            entry["diff_note"] = item.get("diff_note", "binary_or_large")
        files.append(entry)
    counts = {s: sum(1 for i in items.values() if i["status"] == s) for s in STATUSES}
    evidence = {
        "workspace": report["root"] or task.workspace_root,
        "workspace_on": "worker",
        "worker": owner,
        "label": report["label"] or task.workspace_label,
        "source_run": source.pk,
        "checked": report["checked"],
        "counts": counts,
        "files": files,
        "more": max(0, len(items) - ws.EVIDENCE_FILES) + report["more"],
        "remaining_steps": [{"seq": s.seq, "tool": s.tool} for s in steps],
    }
    if not report["complete"]:
        evidence["walk"] = {"limit": report["checked"], "last": None}
    return evidence


def _summary(items: dict[str, dict], more: int, limit: int = 5) -> str:
    diffs = [wd.FileDiff(key, i["status"], None, None) for key, i in items.items()]
    text = ws.summary(diffs, limit)
    if more:
        text = text.replace(" from the manifest", f" (and {more} more not listed) from the manifest", 1)
    return text


@transaction.atomic
def workspace_reported(*, worker: Worker, run_id: int, epoch, body) -> dict:
    """Record a worker's validation of the workspace it holds, and admit or refuse the continuation it claimed.

    Answers `{"admitted": true}`, or `{"admitted": false, "action", "detail"}` once the run is refused and the
    action opened (committed: the difference is a fact to keep). A report for a run already validated is
    answered as it was; a run that awaits no validation is refused (`not_eligible`).
    """
    report = clean_report(body)
    run = services.held_run(worker=worker, run_id=run_id, epoch=epoch)
    if (run.carry or {}).get("validated"):
        return {"admitted": True}
    if not services.awaits_validation(run):
        raise NotEligible(f"Run #{run.pk} awaits no workspace validation.", reason="not_validating")
    task = run.task
    explained = (run.carry or {}).get("explained") or {}
    everything, paths = explained.get("all") is True, set(explained.get("paths") or ())
    items = report["items"]
    WorkspaceReport.objects.create(
        task=task,
        run=run,
        kind="validation",
        worker=run.lease_owner,
        label=report["label"],
        root=report["root"],
        checked=report["checked"],
        complete=report["complete"],
        files=list(items.values())[: ws.EVIDENCE_FILES],
    )
    declared = {k: i for k, i in items.items() if everything or k in paths}
    if declared:
        # A step a person declared performed wrote these: the disk at them is recorded as its effect.
        manifest_apply(
            task=task,
            entries={k: i["actual"] for k, i in declared.items() if i["actual"] is not None},
            gone=[k for k, i in declared.items() if i["actual"] is None],
            source="decision",
        )
    differing = {k: i for k, i in items.items() if k not in declared}
    if not differing and not (report["more"] and not everything):
        services.run_validated(run, actor=worker, checked=report["checked"])
        return {"admitted": True}
    source = Run.objects.select_related("task").get(pk=run.continues_id)
    evidence = evidence_of(task, source, differing, report, run.lease_owner)
    detail = _summary(differing, report["more"])
    run = services.run_refused_by_worker(run, actor=worker, detail=detail, files=len(differing) + report["more"])
    action = action_open(
        run=Run.objects.select_related("task").get(pk=run.pk),
        kind=ActionKind.WORKSPACE_VALIDATION,
        cause=WORKSPACE_VALIDATION_FAILED,
        evidence=evidence,
        recovery_owner="role:admin",
        actor=worker,
    )
    detail = f"{detail} Recovery action #{action.pk} lists them; nothing of the run ran."
    Run.objects.filter(pk=run.pk).update(error_detail=detail)
    return {"admitted": False, "action": action.pk, "detail": detail, "files": [shown(k) for k in differing][:20]}
