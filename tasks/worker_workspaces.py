"""Workspaces a worker holds on its own disk (workers anywhere, DESIGN §9): the manifest as the worker reports it.

A worker started with `CONSOLE_WORKER_WORKSPACES` keeps its tasks' workspaces
under that root, where the server cannot see them. It advertises the root's
label with its claim (`Task.workspace_label`), reads every file a step wrote and
sends the manifest entries with the step's completion, compares its workspace
with the manifest before a continuation runs, and performs repairs as jobs. The
server stores what the worker reports and never opens a file on that disk.

An entry on the wire (ENTRY) is `{"path", "kind", "size", "mtime_ns",
"ctime_ns", "ino", "sha256", "link", "kept", "not_kept"}`: the path as text, or
`{"$text": …}` for a name that is not text (tasks.payloads), like every path the
API shows.
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.utils import timezone

from tasks import payloads
from tasks.errors import Invalid
from tasks.models import Step, Task, WorkspaceFile
from tasks.workspace import KINDS, SHA_RE, UnsafePath, clean_relpath, wire

MAX_ENTRIES = 10_000  # entries one report may carry (the worker's walk stops there and says so)
NOT_KEPT = ("", "large", "store_error", "unreadable", "hash_too_large", "hash_budget", "changed_while_read")


def held_by_worker(task: Task) -> bool:
    """Whether a worker holds this task's workspace on its own disk (the server never reads it)."""
    return bool(task.workspace_label)


def entry_of_row(row: WorkspaceFile) -> dict:
    """A manifest row as ENTRY."""
    return {
        "path": wire(row.path),
        "kind": row.kind,
        "size": row.size,
        "mtime_ns": row.mtime_ns,
        "ctime_ns": row.ctime_ns,
        "ino": row.ino,
        "sha256": row.sha256 or None,
        "link": row.link,
        "kept": row.kept,
        "not_kept": row.not_kept,
    }


def manifest_wire(task: Task) -> list[dict]:
    """The task's manifest as ENTRY dicts, in path order (what a claim or a repair job hands the worker)."""
    return [entry_of_row(r) for r in WorkspaceFile.objects.filter(task=task).order_by("path")]


def _int(value, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**63:
        raise Invalid(f"`{name}` must be a whole number from 0.", field=name)
    return value


def clean_entry(raw, where: str = "entries") -> tuple[str, dict]:
    """A worker's ENTRY checked field by field: (stored key, the entry with its path as given). Invalid if not."""
    if not isinstance(raw, dict):
        raise Invalid(f"`{where}` must hold objects.", field=where)
    try:
        key = clean_relpath(raw.get("path"))
    except UnsafePath as exc:
        raise Invalid(f"`{where}` names a path that is not inside the workspace: {exc}", field=where) from exc
    kind = raw.get("kind", "file")
    if kind not in KINDS:
        raise Invalid(f"`{where}`: kind must be one of {', '.join(KINDS)}.", field=where)
    sha = raw.get("sha256")
    if sha is not None and not (isinstance(sha, str) and SHA_RE.match(sha)):
        raise Invalid(f"`{where}`: sha256 must be 64 lowercase hex digits or null.", field=where)
    link = raw.get("link")
    if link is not None:
        try:
            payloads.decode(link)
        except payloads.PayloadError as exc:
            raise Invalid(f'`{where}`: link must be text or {{"$text": …}}.', field=where) from exc
    not_kept = raw.get("not_kept") or ""
    if not_kept not in NOT_KEPT:
        raise Invalid(f"`{where}`: not_kept must be one of {', '.join(n for n in NOT_KEPT if n)}.", field=where)
    entry = {
        "path": raw.get("path"),
        "kind": kind,
        "size": _int(raw.get("size", 0), "size"),
        "mtime_ns": _int(raw.get("mtime_ns", 0), "mtime_ns"),
        "ctime_ns": _int(raw.get("ctime_ns", 0), "ctime_ns"),
        "ino": _int(raw.get("ino", 0), "ino"),
        "sha256": sha,
        "link": link,
        "kept": raw.get("kept") is True and kind == "file" and sha is not None,
        "not_kept": not_kept,
    }
    return key, entry


def clean_entries(raw, where: str = "entries") -> dict[str, dict]:
    if raw is None:
        return {}
    if not isinstance(raw, list) or len(raw) > MAX_ENTRIES:
        raise Invalid(f"`{where}` must be a list of at most {MAX_ENTRIES} entries.", field=where)
    return dict(clean_entry(e, where) for e in raw)


def clean_paths(raw, where: str) -> list[str]:
    if raw is None:
        return []
    if not isinstance(raw, list) or len(raw) > MAX_ENTRIES:
        raise Invalid(f"`{where}` must be a list of at most {MAX_ENTRIES} workspace paths.", field=where)
    try:
        return list(dict.fromkeys(clean_relpath(p) for p in raw))
    except UnsafePath as exc:
        raise Invalid(f"`{where}` names a path that is not inside the workspace: {exc}", field=where) from exc


def manifest_apply(
    *,
    task: Task,
    step: Step | None = None,
    entries: dict[str, dict],
    gone=(),
    source: str = "step",
    drop_unlisted: bool = False,
) -> list[str]:
    """Record what the worker reported, in the caller's transaction: `entries` (stored key → ENTRY) upserted
    with `step` as their writer, `gone` keys deleted, and with `drop_unlisted` (a complete walk of the whole
    workspace) every row the walk did not list. A non-empty directory is implied by its entries and not kept.
    Returns the keys changed."""
    now = timezone.now()
    rows = [
        WorkspaceFile(
            task=task,
            path=key,
            kind=e["kind"],
            size=e["size"],
            mtime_ns=e["mtime_ns"],
            ctime_ns=e["ctime_ns"],
            ino=e["ino"],
            sha256=e["sha256"] or "",
            link=e["link"],
            kept=e["kept"],
            not_kept="" if e["kept"] or e["kind"] != "file" else e["not_kept"],
            step=step,
            run_id_seen=step.run_id if step is not None else None,
            seq=step.seq if step is not None else None,
            tool=step.tool if step is not None else "",
            source=source,
            recorded_at=now,
        )
        for key, e in entries.items()
    ]
    if rows:
        WorkspaceFile.objects.bulk_create(
            rows,
            batch_size=500,
            update_conflicts=True,
            unique_fields=["task", "path"],
            update_fields=[
                "kind", "size", "mtime_ns", "ctime_ns", "ino", "sha256", "link", "kept", "not_kept",
                "not_kept_detail", "step", "run_id_seen", "seq", "tool", "source", "recorded_at",
            ],
        )  # fmt: skip
    dropped = [k for k in gone if k not in entries]
    if drop_unlisted:
        listed = set(entries)
        dropped += [
            k for k in WorkspaceFile.objects.filter(task=task).values_list("path", flat=True) if k not in listed
        ]
    for i in range(0, len(dropped), 500):
        WorkspaceFile.objects.filter(task=task, path__in=dropped[i : i + 500]).delete()
    return sorted({*entries, *dropped})


def iso_ns(ns: int | None) -> str | None:
    if not ns:
        return None
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).isoformat()


def side_of(entry: dict | None) -> dict | None:
    """An ENTRY as one side (recorded or actual) of a file's evidence, in the shape the server's own reads use."""
    if not isinstance(entry, dict):
        return None
    kind = entry.get("kind", "file")
    side = {"size": entry.get("size"), "sha256": entry.get("sha256"), "mtime": iso_ns(entry.get("mtime_ns"))}
    if kind != "file":
        side["kind"] = kind
    if entry.get("link") is not None:
        side["link"] = entry["link"]
    if kind == "file" and entry.get("sha256") is None:
        side["hashed"] = False
    if kind == "file" and entry.get("not_kept"):
        side["not_kept"] = entry["not_kept"]
    return side
