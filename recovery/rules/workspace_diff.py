"""Pure: a workspace's manifest and what is on disk in; the differences, a reconcile plan and a text diff out.

No ORM and no disk here (recovery/workspaces/validation.py reads both), so every rule is
a plain function of plain data, for every kind of entry:

- a regular file is `same` when its size, times and inode match the record
  (a person cannot set a ctime back) or its content hash does; `changed` when
  its size or hash differs, or when its times moved and its content could not
  be read to compare (`verified` False: too large to hash, or not read yet);
- a symbolic link is `same` when its target is (it is never followed), a
  device when its number is; an empty directory, a FIFO or a socket when it is
  still one; an entry of another kind than recorded is `changed`;
- `added` when nothing was recorded for it (a directory with entries is
  implied by them, never added itself), `missing` when a recorded entry is gone
  — only where the walk reached: beyond a walk's bound nothing is missing;
- reconcile adopts what only a person changed, links and special files
  included (recorded as what they are, never followed), and *holds* what it
  must not decide: an entry the continuation's remaining plan also changes, a
  change older than the recorded version.
"""

import difflib
import posixpath
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from tasks.workspace import UnsafePath, clean_relpath

DIFF_LIMIT = 64 * 1024

SAME, CHANGED, ADDED, MISSING = "same", "changed", "added", "missing"
ADOPT, HOLD = "adopt", "hold"


@dataclass(frozen=True)
class Entry:
    size: int
    mtime_ns: int
    sha256: str | None
    kind: str = "file"  # "file" | "link" | "dir" | "fifo" | "socket" | "device" | "other"
    link: str | None = None  # a link's target, a device's number
    ctime_ns: int = 0  # with size, mtime and inode: a file's identity (0: unknown, never trusted)
    ino: int = 0
    empty: bool = False  # a directory with nothing in it
    not_kept: str = ""  # why a file's content was not read or kept (tasks.workspace)

    @property
    def identity(self) -> tuple:
        return (self.size, self.mtime_ns, self.ctime_ns, self.ino)


@dataclass(frozen=True)
class FileDiff:
    path: str
    status: str
    recorded: Entry | None
    actual: Entry | None
    verified: bool = True  # False: its times moved and its content could not be read to compare


def _status(r: Entry, a: Entry) -> tuple[str, bool]:
    if r.kind != a.kind:
        return CHANGED, True
    if a.kind == "file":
        if r.ctime_ns and r.identity == a.identity:
            return SAME, True
        if r.size != a.size:
            return CHANGED, True
        if r.sha256 and a.sha256:
            return (SAME if r.sha256 == a.sha256 else CHANGED), True
        return CHANGED, False
    if a.kind in ("link", "device"):
        return (SAME if r.link == a.link else CHANGED), True
    return SAME, True


def compare(
    recorded: Mapping[str, Entry], actual: Mapping[str, Entry], *, covers: Callable[[str], bool] = lambda p: True
) -> list[FileDiff]:
    """Every path of either side, sorted, with its status. A recorded path the walk did not reach (`covers`
    False) is left out: it is neither there nor gone."""
    out = []
    for path in sorted(set(recorded) | set(actual)):
        r, a = recorded.get(path), actual.get(path)
        verified = True
        if r is None:
            if a.kind == "dir" and not a.empty:
                continue  # implied by its entries
            status = ADDED
        elif a is None:
            if not covers(path):
                continue
            status = MISSING
        else:
            status, verified = _status(r, a)
        out.append(FileDiff(path, status, r, a, verified))
    return out


def differing(diffs: Iterable[FileDiff], *, explained: Iterable[str] = ()) -> list[FileDiff]:
    """The differences, leaving out entries whose disk state a person's decision explains (they are recorded
    as that step's effect, as what they are: a link with its target, never followed)."""
    explained = set(explained)
    return [d for d in diffs if d.status != SAME and d.path not in explained]


@dataclass(frozen=True)
class PlannedStep:
    seq: int
    tool: str
    args: Mapping = field(default_factory=dict)


def _norm(path) -> str | None:
    """A plan's path argument as a stored key (tasks.workspace.clean_relpath), or None."""
    try:
        return clean_relpath(path)
    except UnsafePath:
        return None


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
    reason: str  # why: the entry's status when adopted; "plan_changes", "older" when held
    seqs: tuple[int, ...] = ()


def reconcile_plan(diffs: Iterable[FileDiff], steps: Iterable[PlannedStep]) -> list[Verdict]:
    """For each difference: adopt the disk's entry into the manifest, or hold it (listed, untouched).

    Every kind is adopted as what it is — a link with its target (never
    followed), an empty directory, a FIFO, a socket, a device — so that what a
    person (or `python -m venv`) made does not block recovery again at the next
    validation. Held: what the remaining plan also changes, and a regular file
    whose disk version is older than the recorded one.
    """
    steps = list(steps)
    out = []
    for d in diffs:
        if d.status == SAME:
            continue
        seqs = plan_touches(d.path, steps)
        if seqs:
            out.append(Verdict(d.path, HOLD, "plan_changes", tuple(seqs)))
        elif (
            d.status == CHANGED
            and d.recorded is not None
            and d.actual.kind == "file" == d.recorded.kind
            and d.actual.mtime_ns < d.recorded.mtime_ns
        ):
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
