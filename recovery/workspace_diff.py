"""Pure: a workspace's manifest and what is on disk in; the differences, a reconcile plan and a text diff out.

No ORM and no disk here (recovery/workspaces.py reads both), so every rule is
a plain function of plain data:

- a file is `same` when its content hash and size match the record, `changed`
  when they do not (or a recorded file is now a link), `added` when nothing
  was recorded for it, `missing` when a recorded file is gone;
- reconcile adopts what only a person changed and *holds* what it must not
  decide: a file the continuation's remaining plan also changes, a change
  older than the recorded version, a symbolic link or special file (never
  followed, never adopted).
"""

import difflib
import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

DIFF_LIMIT = 64 * 1024

SAME, CHANGED, ADDED, MISSING = "same", "changed", "added", "missing"
ADOPT, HOLD = "adopt", "hold"


@dataclass(frozen=True)
class Entry:
    size: int
    mtime_ns: int
    sha256: str | None
    kind: str = "file"  # "file" | "link" | "other"
    link: str | None = None


@dataclass(frozen=True)
class FileDiff:
    path: str
    status: str
    recorded: Entry | None
    actual: Entry | None


def compare(recorded: Mapping[str, Entry], actual: Mapping[str, Entry]) -> list[FileDiff]:
    """Every path of either side, sorted, with its status."""
    out = []
    for path in sorted(set(recorded) | set(actual)):
        r, a = recorded.get(path), actual.get(path)
        if r is None:
            status = ADDED
        elif a is None:
            status = MISSING
        elif a.kind == "file" and a.sha256 == r.sha256 and a.size == r.size:
            status = SAME
        else:
            status = CHANGED
        out.append(FileDiff(path, status, r, a))
    return out


def differing(diffs: Iterable[FileDiff], *, explained: Iterable[str] = ()) -> list[FileDiff]:
    """The differences, leaving out regular files whose disk state a person's decision explains.

    A link or special file is never explained away: it stays a difference.
    """
    explained = set(explained)
    return [
        d
        for d in diffs
        if d.status != SAME and not (d.path in explained and (d.actual is None or d.actual.kind == "file"))
    ]


@dataclass(frozen=True)
class PlannedStep:
    seq: int
    tool: str
    args: Mapping = field(default_factory=dict)


def _norm(path) -> str | None:
    if not isinstance(path, str) or not path or path.startswith("/"):
        return None
    norm = posixpath.normpath(path)
    return None if norm.startswith("..") else norm


def plan_touches(path: str, steps: Iterable[PlannedStep]) -> list[int]:
    """Steps still to run that change `path`: a file tool naming it, or a bash command mentioning it.

    A bash command cannot be known in advance; mentioning the file's path or
    name is taken as changing it (erring towards holding, never towards
    overwriting).
    """
    name = posixpath.basename(path)
    seqs = []
    for step in steps:
        args = step.args if isinstance(step.args, Mapping) else {}
        if step.tool in ("file_write", "file_edit") and _norm(args.get("path")) == path:
            seqs.append(step.seq)
        elif step.tool == "bash" and isinstance(args.get("command"), str):
            command = args["command"]
            if path in command or (name and name in command):
                seqs.append(step.seq)
    return seqs


@dataclass(frozen=True)
class Verdict:
    path: str
    action: str  # ADOPT | HOLD
    reason: str  # why: the file's status when adopted; "plan_changes", "older", "link", "special" when held
    seqs: tuple[int, ...] = ()


def reconcile_plan(diffs: Iterable[FileDiff], steps: Iterable[PlannedStep]) -> list[Verdict]:
    """For each difference: adopt the disk's version into the manifest, or hold it (listed, untouched)."""
    steps = list(steps)
    out = []
    for d in diffs:
        if d.status == SAME:
            continue
        if d.actual is not None and d.actual.kind == "link":
            out.append(Verdict(d.path, HOLD, "link"))
            continue
        if d.actual is not None and d.actual.kind != "file":
            out.append(Verdict(d.path, HOLD, "special"))
            continue
        seqs = plan_touches(d.path, steps)
        if seqs:
            out.append(Verdict(d.path, HOLD, "plan_changes", tuple(seqs)))
        elif d.status == CHANGED and d.recorded is not None and d.actual.mtime_ns < d.recorded.mtime_ns:
            out.append(Verdict(d.path, HOLD, "older"))
        else:
            out.append(Verdict(d.path, ADOPT, d.status))
    return out


def text_of(data: bytes | None) -> str | None:
    """`data` as text when it is small UTF-8 without NUL bytes; else None (binary or too large)."""
    if data is None or len(data) > DIFF_LIMIT or b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def unified_diff(path: str, old: bytes | None, new: bytes | None) -> str | None:
    """A unified diff from the recorded content to the disk's, or None when either side is not small text.

    `old` / `new` of None with `b""` semantics are the caller's: pass b"" for a side that does not exist.
    """
    a, b = text_of(old), text_of(new)
    if a is None or b is None:
        return None
    lines = difflib.unified_diff(
        a.splitlines(keepends=True),
        b.splitlines(keepends=True),
        fromfile=f"recorded/{path}" if old else "/dev/null",
        tofile=f"disk/{path}" if new else "/dev/null",
    )
    text = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
    return text[: DIFF_LIMIT * 2]
