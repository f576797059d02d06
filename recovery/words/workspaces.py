"""Workspaces in words (DESIGN §9): file states, repairs, held copies, the workspace panel."""

import json
from dataclasses import dataclass
from datetime import datetime

from recovery import humanize
from recovery.words.card import ActionView
from recovery.words.lines import At, Line
from recovery.words.vocabulary import cause, owner
from tasks.workspace import wire

WORKSPACE_KINDS = ("workspace_validation", "workspace_export")

FILE_STATUS = {
    "same": "unchanged",
    "changed": "changed on disk",
    "added": "added on disk",
    "missing": "missing on disk",
    "held": "held — not overwritten",
}

HELD_WHY = {
    "plan_changes": "the remaining plan also changes it",
    "older": "older than the recorded version",
    "link": "a symbolic link — never followed",
    "special": "not a regular file",
}

# What an entry that is not a regular file is, on a panel, a card or a held copy (tasks.workspace KINDS).
KIND_WORDS = {
    "link": "symbolic link → {link} (never followed)",
    "dir": "empty directory",
    "fifo": "FIFO (named pipe; never opened)",
    "socket": "socket (never opened)",
    "device": "device {link} (never opened)",
    "other": "not a regular file",
}

# Why a file's content was not read or not kept (WorkspaceFile.not_kept, tasks.workspace).
NOT_KEPT = {
    "large": "not kept: larger than the {keep} kept per file",
    "store_error": "not kept: the content store could not write it",
    "unreadable": "not kept: the console could not read it",
    "hash_too_large": "not read: larger than the {hash_max} the console hashes; compared by size and times",
    "hash_budget": "not read this time: the reading budget was spent; compared by size and times",
    "changed_while_read": "not read: it changed while it was being read; recorded by size and times",
    "not_read": "not read before it was recorded; recorded by size and times",
}


def path_text(path) -> str:
    """A workspace path as text: itself, or its wire form (`{"$text": …}`) for a name that is not text."""
    return path if isinstance(path, str) else json.dumps(path, ensure_ascii=False)


def _size(n: int) -> str:
    from django.template.defaultfilters import filesizeformat

    return str(filesizeformat(n)).replace("\xa0", " ")


def not_kept_text(code: str, detail: str = "") -> str:
    from tasks.workspace import hash_max, keep_limit

    text = NOT_KEPT.get(code, code.replace("_", " ")).format(keep=_size(keep_limit()), hash_max=_size(hash_max()))
    return f"{text} ({detail})" if detail else text


def side_text(side: dict | None) -> str:
    """What one side of an entry is when it is not simply a hashed file: its kind, or why its content was not
    read (a file's size and hash are drawn as they are)."""
    if not side:
        return ""
    kind = side.get("kind")
    if kind:
        link = side.get("link")
        return KIND_WORDS.get(kind, KIND_WORDS["other"]).format(link=path_text(link) if link is not None else "?")
    if side.get("hashed") is False or side.get("not_kept") in ("hash_too_large", "hash_budget"):
        return not_kept_text(side.get("not_kept") or "not_read")
    return ""


WRITERS = {
    "step": "written by step {seq} of run #{run} ({tool})",
    "decision": "step {seq} of run #{run} ({tool}), declared performed by a person",
    "reconcile": "adopted from disk by a reconcile",
    "baseline": "in the workspace when the first run started",
}

REPAIR_NAMES = {"reconcile": "Reconcile", "reissue": "Isolated reissue", "retry_export": "Retry export"}


def _files(paths: list, limit: int = 4) -> str:
    shown = ", ".join(path_text(p) for p in paths[:limit])
    return shown + (f" and {len(paths) - limit} more" if len(paths) > limit else "")


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def file_status(status: str) -> str:
    return FILE_STATUS.get(status, status)


def writer(recorded: dict | None) -> str:
    """Who wrote a recorded file, from its manifest row (as the API shows it)."""
    if not recorded:
        return "not in the manifest"
    template = WRITERS.get(recorded.get("source") or "step", "")
    if recorded.get("source") in (None, "step", "decision") and not recorded.get("seq"):
        return "recorded"
    return template.format(seq=recorded.get("seq"), run=recorded.get("run"), tool=recorded.get("tool") or "?")


def held_note(item: dict) -> str:
    why = item.get("reason", "")
    if why == "plan_changes" and item.get("seqs"):
        steps = " and ".join(f"step {s}" for s in item["seqs"])
        return f"{steps} of the remaining plan also {'changes' if len(item['seqs']) == 1 else 'change'} it"
    return HELD_WHY.get(why, why.replace("_", " "))


def _would_hold(f: dict) -> bool:
    # Links and special files are adopted as what they are; what the remaining plan changes is held.
    return bool(f.get("plan"))


# A repair job's status while a worker holding the workspace has not reported it (recovery.transitions.REPAIRS).
JOB_PENDING = ("queued", "claimed")

# Why a worker could not do a repair job (its error `code`), when it gave no detail.
JOB_ERRORS = {
    "content_not_kept": "the worker's content store does not hold the recorded content of every file",
    "action_closed": "the action closed before the worker reported; its report was kept and not applied",
}


def job_error_text(error: dict) -> str:
    """A repair job's error as the worker (or the console) reported it: its detail, and the files it names."""
    code = error.get("code") or "repair_failed"
    text = error.get("detail") or JOB_ERRORS.get(code, code.replace("_", " "))
    files = error.get("files") or []
    return f"{text} ({code}{': ' + _files(files) if files else ''})"


def repair_line(repair) -> Line:
    """What a repair actually did (its saved result), never what was asked for; a repair job a worker holding
    the workspace has not reported yet says who asked, and who is doing it."""
    r = repair.result if isinstance(repair.result, dict) else {}
    who = repair.requested_by.username if getattr(repair, "requested_by", None) else "someone"
    name = REPAIR_NAMES.get(repair.repair, repair.repair)
    if repair.status == "queued":
        return (
            f"{name} asked by {who} ",
            At(repair.created_at),
            f": waiting for a worker holding this workspace (label “{repair.label}”) to take it. Nothing is "
            "repaired until that worker reports.",
        )
    if repair.status == "claimed":
        return (
            f"{name} asked by {who} ",
            At(repair.created_at),
            f": worker {repair.claimed_by} is doing it since ",
            At(repair.claimed_at),
            ". Nothing is repaired until it reports.",
        )
    head = (f"{name} by {who} ", At(repair.completed_at or repair.created_at))
    if r.get("worker"):
        head = (*head, f" on worker {r['worker']}")
    if repair.status == "failed" and isinstance(r.get("error"), dict):
        return (*head, f": failed — {job_error_text(r['error'])}. Nothing was changed.")
    n = r.get("counts") or {}
    if repair.repair == "reconcile":
        held = [h.get("path") for h in r.get("held", [])]
        tail = (
            f": {_count(n.get('checked', 0), 'file')} checked, {n.get('adopted', 0)} adopted into the manifest, "
            f"{n.get('held', 0)} held"
        )
        if held:
            tail += f" ({_files(held)}: listed, never overwritten; a copy is kept in {r.get('held_copy')})"
        return (*head, tail + ". No file on disk was changed.")
    if repair.repair == "reissue":
        return (
            *head,
            f": {_count(n.get('rebuilt', 0), 'file')} rebuilt from recorded content into {r.get('workspace')}; "
            f"the old directory {r.get('old_workspace')} is kept as it was, as a held copy "
            f"({_count(n.get('kept', 0), 'difference')} kept in it)"
            + (
                f"; {_count(n['not_remade'], 'socket or device', 'sockets or devices')} not made again (the "
                "console never makes one; its record is dropped)."
                if n.get("not_remade")
                else "."
            ),
        )
    if r.get("ok"):
        return (
            *head,
            f": {_count(n.get('copied', 0), 'file')} copied to {r.get('destination')}, {n.get('unchanged', 0)} "
            f"unchanged, {n.get('kept', 0)} replaced after keeping a copy, {n.get('skipped', 0)} skipped "
            "(links are never followed).",
        )
    return (*head, f": failed again — {humanize.error_text(r.get('error') or '') or 'no detail'}")


def repair_task_line(action, repair_task) -> Line | None:
    if repair_task is None:
        return None
    back = owner(action.return_owner) or "its return owner"
    if repair_task.status == "done":
        return (f"Repair task #{repair_task.pk} ({repair_task.agent.name}) is done: this action is back with {back}.",)
    if repair_task.status == "cancelled":
        return (f"Repair task #{repair_task.pk} was cancelled: this action stays with {back}.",)
    return (
        f"Repair task #{repair_task.pk} is open, owned by {repair_task.agent.name}: when it is done this action "
        f"returns to {back}.",
    )


def workspace_confirmations(action) -> dict:
    """What each repair will do, restated before it is confirmed (from the evidence; the disk is read again)."""
    e = action.evidence or {}
    files = e.get("files") or []
    if action.kind == "workspace_export":
        return {
            "retry_export": (
                f"Retry export copies every file of {e.get('workspace') or 'the workspace'} to "
                f"{e.get('destination') or 'the export destination'} again, for run #{action.run_id}. A file "
                "already there with other content is first kept as a held copy, never lost; links are never "
                "followed. Nothing in the workspace changes."
                + (
                    " A worker holding this workspace does it on its disk when it next asks for work; this card "
                    "waits for its report and then shows what it did."
                    if e.get("workspace_on") == "worker"
                    else ""
                ),
            )
        }
    hold = [f["path"] for f in files if _would_hold(f)]
    adopt = [f["path"] for f in files if not _would_hold(f)]
    reconcile = (
        f"Reconcile reads the workspace again and, for run #{action.run_id}, adopts into the manifest the files "
        f"only a person changed ({_files(adopt) or 'none'})"
    )
    reconcile += (
        f"; it holds {_files(hold)}, which the remaining plan also changes (listed and copied, never overwritten)"
        if hold
        else ""
    )
    reconcile += ". No file on disk is changed or deleted; what changed since this card was drawn is in its result."
    reissue = (
        f"Isolated reissue builds a fresh directory from the manifest's recorded content, points the task at "
        f"it, and keeps {e.get('workspace') or 'the current directory'} exactly as it is, as a held copy linked "
        f"from the task. Run #{action.run_id}'s continuation then runs in the fresh directory; nothing is "
        "deleted."
    )
    if e.get("workspace_on") == "worker":
        # The workspace is on a worker's disk: the repair is that worker's job (recovery/workspaces/repair_jobs.py).
        on = (
            f" A worker holding this workspace (label “{e.get('label') or '?'}”) does it on its disk when it next "
            "asks for work; this card waits for its report and then shows what it did."
        )
        reconcile, reissue = reconcile + on, reissue + on
    return {"reconcile": (reconcile,), "reissue": (reissue,)}


@dataclass
class FileView:
    path: str
    status: str
    status_text: str
    recorded: dict | None
    actual: dict | None
    writer: str
    diff: str | None = None
    note: str = ""

    def __post_init__(self):
        self.path = path_text(self.path)

    @property
    def recorded_note(self) -> str:
        return side_text(self.recorded)

    @property
    def actual_note(self) -> str:
        return side_text(self.actual)

    @property
    def recorded_at(self) -> datetime | None:
        return _moment((self.recorded or {}).get("mtime"))

    @property
    def actual_at(self) -> datetime | None:
        return _moment((self.actual or {}).get("mtime"))


def _moment(value) -> datetime | None:
    if isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None


def repair_rows(repair) -> list[dict]:
    """The files of a repair's result: what was done to each, with the hash before and after."""
    if repair is None or not isinstance(repair.result, dict):
        return []
    r = repair.result
    rows = []

    def sha(side) -> str | None:
        return side.get("sha256") if isinstance(side, dict) else side

    for a in r.get("adopted", []):
        rows.append(
            {
                "path": path_text(a["path"]),
                "done": f"adopted ({file_status(a['status'])})",
                "before": sha(a.get("before")),
                "after": sha(a.get("after")),
            }
        )
    for h in r.get("held", []):
        rows.append(
            {
                "path": path_text(h["path"]),
                "done": f"held: {held_note(h)}",
                "before": sha(h.get("before")),
                "after": sha(h.get("after")),
            }
        )
    for b in r.get("rebuilt", []):
        rows.append(
            {
                "path": path_text(b["path"]),
                "done": "rebuilt from recorded content" if not b.get("kind") else f"made again: {side_text(b)}",
                "before": b.get("before"),
                "after": b.get("after"),
            }
        )
    for x in r.get("not_remade", []):
        rows.append(
            {"path": path_text(x["path"]), "done": f"not made again: {side_text(x)}", "before": None, "after": None}
        )
    for x in r.get("copied", []):
        rows.append(
            {"path": path_text(x["path"]), "done": "copied", "before": x.get("before"), "after": x.get("after")}
        )
    for x in r.get("kept", []):
        rows.append(
            {
                "path": path_text(x["path"]),
                "done": f"kept first, in {path_text(x.get('copy'))}",
                "before": x.get("sha256"),
                "after": x.get("sha256"),
            }
        )
    for x in r.get("skipped", []):
        rows.append(
            {
                "path": path_text(x["path"]),
                "done": "skipped: links and special files are never followed",
                "before": None,
                "after": None,
            }
        )
    return rows


def evidence_files(action) -> list[FileView]:
    e = action.evidence or {}
    out = []
    notes = {
        "not_kept": "no diff: the recorded content was not kept",
        "binary_or_large": "no diff: not text under 64 KiB",
        "link": "a symbolic link — never followed",
        "special": "not a regular file: nothing to diff",
    }
    for f in e.get("files") or []:
        plan = f.get("plan") or []
        note = notes.get(f.get("diff_note"), "")
        if f.get("verified") is False:
            why = not_kept_text((f.get("actual") or {}).get("not_kept") or "not_read")
            note = (note + "; " if note else "") + f"its times changed; content {why.split(': ', 1)[-1]}"
        if plan:
            steps = " and ".join(f"step {s}" for s in plan)
            note = (note + "; " if note else "") + f"the remaining plan changes it ({steps})"
        out.append(
            FileView(
                f["path"],
                f["status"],
                file_status(f["status"]),
                f.get("recorded"),
                f.get("actual"),
                writer(f.get("recorded")),
                f.get("diff"),
                note,
            )
        )
    return out


@dataclass(frozen=True)
class JobFacts:
    """What a card waiting for a repair job says about the workers that could do it (read by the caller)."""

    polled_at: datetime | None  # when a worker of the job's label last asked for repair work (within a day)
    polled_by: str  # which one
    polled_recently: bool  # within a lease: a worker of that label is there to take it
    claim_silent: bool  # the claimer has not reported for a lease: another worker of the label may take it over


def _job_next(job, facts: JobFacts | None) -> Line:
    label = f"“{job.label}”"
    said: Line = ()
    if job.status == "claimed" and facts is not None and facts.claim_silent:
        said = (
            f"Worker {job.claimed_by} took it ",
            At(job.claimed_at),
            f" and has not reported since: another worker of label {label} takes it over when it next asks for work. ",
        )
    elif job.status == "claimed":
        said = (f"What worker {job.claimed_by} reports decides what this card says next. ",)
    if facts is None or not facts.polled_recently:
        asked = ("last asked ", At(facts.polled_at), f" ({facts.polled_by})") if facts and facts.polled_at else ()
        said += (
            f"No worker holding workspaces labelled {label} is asking for work now",
            *((" — ", *asked) if asked else (" (none in the last day)",)),
            ". An operator fixes it: start a worker on the machine that holds this workspace with "
            f"CONSOLE_WORKER_WORKSPACES set and CONSOLE_WORKER_WORKSPACES_LABEL={job.label}. ",
        )
    elif job.status == "queued":
        said += (
            f"A worker holding workspaces labelled {label} takes it when it next asks for work (last asked ",
            At(facts.polled_at),
            f", {facts.polled_by}). ",
        )
    return (*said, "Until its report, continuations and follow-ups wait (workspace hold).")


def workspace_action_view(
    action, *, repairs: list, repair_task=None, can_admin: bool, can_operate: bool, job_facts: JobFacts | None = None
):
    e = action.evidence or {}
    validation = action.kind == "workspace_validation"
    if validation:
        n = sum((e.get("counts") or {}).values()) or len(e.get("files") or [])
        title = f"Workspace changed — {_count(n, 'file differs', 'files differ')}"
    else:
        title = "Export failed"
    view = ActionView(badge="", tone="", title=title, cause=cause(action.cause))
    view.files = evidence_files(action) if validation else []
    if not validation:
        error = humanize.error_text(e.get("error") or "") or "no detail"
        view.progress.append((f"Copying to {e.get('destination') or '?'} failed ", At(action.created_at), f": {error}"))
    view.progress += [repair_line(r) for r in repairs]
    view.repair_task = repair_task_line(action, repair_task)
    last = repairs[-1] if repairs else None
    view.result_rows = repair_rows(last)
    status = action.status
    job = last if last is not None and last.status in JOB_PENDING else None
    if job is not None and status in ("open", "exhausted"):
        # A worker has the repair to do: the card waits for its report, and offers no second one meanwhile.
        view.badge, view.tone = (
            ("Waiting for a worker", "pending") if job.status == "queued" else ("Repairing on a worker", "active")
        )
        view.next = _job_next(job, job_facts)
        if can_admin:
            view.controls = frozenset({"repair_task"})
    elif status in ("open", "exhausted"):
        view.badge, view.tone = "Needs decision", "attention"
        held = (
            [h.get("path") for h in (last.result or {}).get("held", [])] if last and last.repair == "reconcile" else []
        )
        if repair_task is not None and repair_task.status not in ("done", "cancelled"):
            view.next = (
                f"Repair task #{repair_task.pk} works on it first; an admin may still confirm a repair once no run "
                "writes in the workspace.",
            )
        elif held:
            view.next = (
                f"{_files(held)} {'is' if len(held) == 1 else 'are'} held: a person and the remaining plan both "
                "change it. An admin may choose Isolated reissue (this directory is kept and linked), or put the "
                "file back by hand and Reconcile again. Continuations and follow-ups wait (workspace hold).",
            )
        elif validation:
            view.next = (
                "An admin confirms a repair: Reconcile adopts what only a person changed; Isolated reissue continues "
                "in a fresh copy of the recorded files and keeps this directory. Until then continuations and "
                "follow-ups wait (workspace hold).",
            )
        else:
            view.next = ("Fix what the error says, then an admin uses Retry export.",)
        if can_admin:
            view.controls = frozenset(
                {"reconcile", "reissue", "repair_task"} if validation else {"retry_export", "repair_task"}
            )
            view.confirm = workspace_confirmations(action)
    elif status == "resolved":
        view.badge, view.tone = "Repaired", "done"
        by = f" by {action.closed_by}" if action.closed_by else ""
        effect = {
            "reconciled": "the manifest now matches the disk; the workspace hold is lifted and the continuation "
            "goes through normal admission",
            "reissued": "the task continues in the fresh directory; the old one is kept as a held copy",
            "exported": "the workspace is copied to its export destination",
        }.get(action.resolution, action.resolution)
        view.closed = (f"{action.resolution.capitalize()}{by} ", At(action.closed_at), f": {effect}.")
    elif status == "retired":
        view.badge, view.tone = "Retired", "muted"
        view.closed = ("Retired ", At(action.closed_at), f": {action.resolution_note or 'no longer current'}.")
    elif status == "cancelled":
        view.badge, view.tone = "Cancelled", "muted"
        by = f" by {action.closed_by}" if action.closed_by else ""
        view.closed = (
            f"Cancelled{by} ",
            At(action.closed_at),
            ". No file was changed; the next continuation validates the workspace again.",
        )
    return view


@dataclass
class WorkspaceView:
    path: str
    hold: Line | None
    export: Line | None
    files: list[FileView]
    held_copies: list[dict]
    empty: str = ""
    counts: str = ""
    walk: str = ""  # what the walk did not reach (walk_note)
    where: Line | None = None  # a workspace a worker holds: whose path it is, and which report the panel shows


def _kept_note(f) -> str:
    """Why a recorded file's content was not kept, on the task's panel (from its manifest entry)."""
    row = f.row
    if row is None or row.kind != "file" or row.kept or not row.not_kept:
        return ""
    return not_kept_text(row.not_kept, row.not_kept_detail)


def walk_note(bounds: dict) -> str:
    """What a walk of a workspace did not reach, in words (recovery.workspaces.validation.walk_bounds)."""
    said = []
    walk = bounds.get("walk")
    if walk:
        last = f" after {path_text(walk['last'])}" if walk.get("last") is not None else ""
        said.append(
            f"The workspace holds more than {walk.get('limit'):,} entries: entries{last} (in path order) are "
            "neither recorded nor compared."
        )
    if bounds.get("unread"):
        said.append(
            f"{_count(bounds['unread'], 'directory', 'directories')} could not be read: nothing in them is compared."
        )
    if bounds.get("too_long"):
        said.append(f"{_count(bounds['too_long'], 'entry has', 'entries have')} a path too long to record.")
    return " ".join(said)


def step_files_note(notes: dict | None) -> str:
    """A step's completion that could not keep every file it changed, or could not read the workspace."""
    if not notes:
        return ""
    said = []
    if notes.get("error"):
        said.append(
            f"the workspace could not be read when it completed ({humanize.error_text(notes['error'])}); "
            "its outcome is recorded"
        )
    items = notes.get("not_kept") or []
    if items:
        n = notes.get("not_kept_count", len(items))
        listed = "; ".join(
            f"{path_text(i.get('path'))} — {not_kept_text(i.get('why', ''), i.get('detail', ''))}" for i in items[:5]
        )
        more = f"; and {n - min(5, len(items))} more" if n > min(5, len(items)) else ""
        said.append(f"{_count(n, 'file')} not kept: {listed}{more}")
    if notes.get("scan"):
        walk = notes["scan"]
        last = f" after {path_text(walk['last'])}" if walk.get("last") is not None else ""
        said.append(f"the workspace holds more than {walk.get('limit'):,} entries: entries{last} were not recorded")
    if notes.get("too_long"):
        said.append(f"{_count(notes['too_long'], 'entry has', 'entries have')} a path too long to record")
    return ". ".join(s[:1].upper() + s[1:] for s in said) + "." if said else ""


def workspace_view(state) -> WorkspaceView:
    """The task page's workspace panel: every file with its status, the hold, held copies, the last export."""
    from recovery.rules.gates import workspace_hold

    files = [
        FileView(
            wire(f.path),
            f.status,
            file_status(f.status),
            f.recorded,
            f.actual,
            writer(f.recorded),
            note=_kept_note(f),
        )
        for f in state.files
    ]
    hold = None
    if state.hold is not None:
        h = workspace_hold(state.hold.pk, state.hold.kind)
        hold = (f"Workspace hold — {h.detail} Continuations and follow-ups wait; lifted by {h.lifted_by}.",)
    export = None
    if state.export is not None:
        x = state.export
        n = (x.result or {}).get("counts") or {}
        if x.finished_at is None:
            export = (f"Exporting to {x.destination} since ", At(x.created_at), ": the copy is under way.")
        elif x.ok:
            export = (
                f"Exported to {x.destination} ",
                At(x.created_at),
                f": {n.get('copied', 0)} copied, {n.get('unchanged', 0)} unchanged.",
            )
        else:
            export = (f"Export to {x.destination} failed ", At(x.created_at), f": {humanize.error_text(x.error)}")
    differ = sum(1 for f in state.files if f.status not in ("same",))
    counts = f"{_count(len(state.files), 'file')}" + (
        f"; {_count(differ, 'differs', 'differ')} from the manifest" if differ else ""
    )
    copies = [
        {
            "copy": c,
            "text": {
                "reissue": "The workspace before an isolated reissue, kept as it was",
                "reconcile": "Files a reconcile held",
                "export": "Destination files an export replaced, kept first",
            }.get(c.reason, c.reason),
        }
        for c in state.held_copies
    ]
    where = None
    if state.on == "worker":
        where = worker_report_line(state.report)
        empty = "" if state.files else "No files recorded yet."
    else:
        empty = (
            ""
            if state.files
            else ("The workspace directory is missing on this server." if not state.exists else "No files yet.")
        )
    return WorkspaceView(state.path, hold, export, files, copies, empty, counts, walk_note(state.bounds), where)


REPORT_KINDS = {
    "step": "the files a step wrote",
    "validation": "its check before a continuation",
    "repair": "a repair it performed",
}


def worker_report_line(report: dict | None) -> Line:
    """Whose disk a worker-held workspace is on, and how old the panel's knowledge of it is."""
    if report is None:
        return ("This path is on the worker that holds the workspace; the server does not read it. "
                "No worker has reported on it yet.",)  # fmt: skip
    return (
        f"This path is on worker {report['worker']} (workspaces {report['label']}); the server does not read it. "
        f"Shown as of that worker's last report, {REPORT_KINDS.get(report['kind'], report['kind'])} (",
        At(report["at"]),
        ").",
    )
