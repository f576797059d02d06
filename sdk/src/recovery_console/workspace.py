"""A worker's own workspaces: where they are, what is in them, and what the console's repairs do to them.

When `CONSOLE_WORKER_WORKSPACES` is set the worker *holds* its tasks' workspaces (a `Holder`): each run works
in `<root>/<workspace_key>`, and the worker, not the server, reads that directory and reports it: with each
file-changing step's completion (`step_report`), before a continuation runs anything (`validate`), and in the
repair jobs the console hands it (`reconcile`, `reissue`). The server keeps the manifest from these reports
(shared/API.md, the issue 26 protocol).

What is read: an entry's `lstat` (no symbolic link is ever followed: each component is opened with O_NOFOLLOW
from the workspace's own directory; FIFOs and devices are never opened), a bounded walk (MAX_ENTRIES entries in
path order, components compared as bytes; a directory is listed only when empty), and a regular file's sha256
(files up to HASH_MAX bytes). Files up to KEEP_MAX bytes are kept in the worker's content store by hash, so a
later validation can show a diff and a reissue can rebuild the workspace from it.

Repairs never delete a file or write over one: a held file is a copy beside the workspace, and a reissue builds
a new directory beside the old one, which stays as it was.

Paths are text here (an undecodable name as surrogateescape, as Python's os functions spell it) and their wire
form on the wire (`payloads.encode`: `{"$text": …}` for a name that is not UTF-8).
"""

from __future__ import annotations

import difflib
import hashlib
import os
import posixpath
import re
import socket
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from recovery_console import payloads

ROOT_ENV = "CONSOLE_WORKER_WORKSPACES"
LABEL_ENV = "CONSOLE_WORKER_WORKSPACES_LABEL"
MAX_ENTRIES = 10_000  # entries one walk looks at; what lies beyond is neither reported nor taken as gone
HASH_MAX = 64 * 1024 * 1024  # a larger file is compared by size, times and inode, never read
KEEP_MAX = 8 * 1024 * 1024  # a larger file is hashed but not kept in the content store
DIFF_MAX = 64 * 1024  # a side larger than this gets no text diff
LISTED = 200  # differences a validation report lists; the rest are counted
CHUNK = 1024 * 1024
FILE_TOOLS = ("file_write", "file_edit")
REMADE = ("link", "dir", "fifo")  # what a reissue makes again; sockets and devices belong to their makers
# A file changed within the kernel clock's tick may change again without its ctime moving: a file this recent is
# read only once its ctime is this old, so the identity reported with its hash changes with any later write.
RACY_NS = 50_000_000

SHA_RE = re.compile("[0-9a-f]{64}")  # a manifest's hash names a file of the store: nothing else is taken
SAME, CHANGED, ADDED, MISSING = "same", "changed", "added", "missing"
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


# --- the holder and its paths ---------------------------------------------------------------------------


def plain_name(value: Any, what: str) -> str:
    """`value` as one plain path component (an organization, a repair's hint), or ValueError."""
    if not isinstance(value, str) or value in ("", ".", "..") or "/" in value or "\x00" in value:
        raise ValueError(f"not a plain {what}: {value!r}"[:200])
    return value


def key_parts(key: Any) -> list[str]:
    """The components of a workspace key: a relative path of plain components, else ValueError."""
    if not isinstance(key, str) or key.startswith("/"):
        raise ValueError(f"a workspace key is a relative path, not {key!r}"[:200])
    return [plain_name(part, "workspace key component") for part in key.split("/")]


@dataclass(frozen=True)
class Holder:
    """This worker's workspaces: the `root` it keeps them under and the `label` it advertises with its claims."""

    root: str
    label: str

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Holder | None:
        """The holder `CONSOLE_WORKER_WORKSPACES` names, or None when it is unset (the server reads workspaces)."""
        root = (environ.get(ROOT_ENV) or "").strip()
        if not root:
            return None
        return cls(os.path.abspath(root), (environ.get(LABEL_ENV) or "").strip() or socket.gethostname())

    def advert(self) -> dict:
        """What a claim says of this worker's workspaces."""
        return {"label": self.label, "root": self.root}

    def path_for(self, claim: Mapping[str, Any], *, create: bool = True) -> str:
        """`<root>/<workspace_key>` of a claim (or a repair job), made with its parents, mode 0o700, by default."""
        path = self.root
        for part in key_parts(claim.get("workspace_key")):
            path = os.path.join(path, part)
            if create:
                os.makedirs(path, mode=0o700, exist_ok=True)
        return path


def org_of(key: str) -> str:
    """The organization of a workspace key: its first component."""
    return key_parts(key)[0]


def clean_path(value: Any) -> str | None:
    """A workspace-relative path (text or its wire form), normalized; None when it is not one (absolute, empty,
    leaving the workspace)."""
    if isinstance(value, Mapping):
        try:
            value = payloads.decode(value)
        except payloads.PayloadError:
            return None
    if not isinstance(value, str) or not value.strip() or "\x00" in value or value.startswith("/"):
        return None
    norm = posixpath.normpath(value)
    if norm in (".", "..") or norm.startswith("../"):
        return None
    return norm


def _parts(path: str) -> tuple[bytes, ...]:
    return tuple(os.fsencode(path).split(b"/"))


def _open_dir(top: str, parts: Iterable[bytes], *, create: bool = False) -> int:
    """A descriptor on `top/parts…`, no component a symbolic link; with `create`, missing ones are made (0o700)."""
    fd = os.open(top, DIR_FLAGS)
    try:
        for name in parts:
            if create:
                try:
                    os.mkdir(name, 0o700, dir_fd=fd)
                except FileExistsError:
                    pass
            below = os.open(name, DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = below
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_file(top: str, path: str) -> int:
    """A blocking read descriptor on the regular file `top/path`; OSError for anything else (never waits on a FIFO)."""
    parts = _parts(path)
    dfd = _open_dir(top, parts[:-1])
    try:
        fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    finally:
        os.close(dfd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise IsADirectoryError(f"{path}: not a regular file")
    os.set_blocking(fd, True)
    return fd


# --- entries --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One workspace entry as the protocol's ENTRY says it; `empty` marks a directory with nothing in it."""

    path: str
    kind: str
    size: int = 0
    mtime_ns: int = 0
    ctime_ns: int = 0
    ino: int = 0
    sha256: str | None = None
    link: str | None = None  # a link's target (never followed), a device's number
    kept: bool = False
    not_kept: str = ""
    empty: bool = False

    @property
    def identity(self) -> tuple:
        return (self.size, self.mtime_ns, self.ctime_ns, self.ino)

    @property
    def listed(self) -> bool:
        """Whether a report lists it: a non-empty directory is implied by its entries."""
        return self.kind != "dir" or self.empty

    def wire(self) -> dict:
        return {
            "path": payloads.encode(self.path),
            "kind": self.kind,
            "size": self.size,
            "mtime_ns": self.mtime_ns,
            "ctime_ns": self.ctime_ns,
            "ino": self.ino,
            "sha256": self.sha256,
            "link": payloads.encode(self.link) if self.link is not None else None,
            "kept": self.kept,
            "not_kept": self.not_kept,
        }

    @classmethod
    def from_wire(cls, item: Any) -> Entry | None:
        """A manifest's ENTRY, or None when it names no workspace path."""
        path = clean_path(item.get("path")) if isinstance(item, Mapping) else None
        if path is None:
            return None
        try:
            link = payloads.decode(item.get("link"))
        except payloads.PayloadError:
            link = None
        kind = item.get("kind") or "other"
        sha = item.get("sha256")
        return cls(
            path=path,
            kind=kind,
            size=_int(item.get("size")),
            mtime_ns=_int(item.get("mtime_ns")),
            ctime_ns=_int(item.get("ctime_ns")),
            ino=_int(item.get("ino")),
            sha256=sha if isinstance(sha, str) and SHA_RE.fullmatch(sha) else None,
            link=link if isinstance(link, str) else None,
            kept=bool(item.get("kept")),
            not_kept=item.get("not_kept") or "",
            empty=kind == "dir",  # a manifest records a directory only when it is empty
        )


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _wire(entry: Entry | None) -> dict | None:
    return entry.wire() if entry is not None else None


def _kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISREG, "file"),
        (stat.S_ISLNK, "link"),
        (stat.S_ISDIR, "dir"),
        (stat.S_ISFIFO, "fifo"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "device"),
        (stat.S_ISBLK, "device"),
    ):
        if test(mode):
            return kind
    return "other"


def _described(dfd: int, name: bytes, path: str, st: os.stat_result, *, empty: bool = False) -> Entry:
    kind = _kind(st.st_mode)
    link = None
    if kind == "link":
        link = os.fsdecode(os.readlink(name, dir_fd=dfd))
    elif kind == "device":
        link = f"{'char' if stat.S_ISCHR(st.st_mode) else 'block'} {os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
    size = st.st_size if kind == "file" else 0
    ino = st.st_ino & (2**63 - 1)  # the console keeps it in a signed 64-bit column
    return Entry(path, kind, size, st.st_mtime_ns, st.st_ctime_ns, ino, link=link, empty=empty)


def _names(fd: int) -> list[bytes]:
    return sorted(os.fsencode(name) for name in os.listdir(fd))


def entry_at(workspace: str, path: str) -> Entry | None:
    """What is at `path` now (its lstat, unhashed), or None: nothing there, or a symbolic link on the way."""
    parts = _parts(path)
    try:
        dfd = _open_dir(workspace, parts[:-1])
    except OSError:
        return None
    try:
        st = os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
        below = _listed(dfd, parts[-1]) if stat.S_ISDIR(st.st_mode) else None
        if below is not None:
            os.close(below[0])
        return _described(dfd, parts[-1], path, st, empty=below is not None and not below[1])
    except OSError:
        return None
    finally:
        os.close(dfd)


@dataclass
class Walk:
    """A bounded walk: every entry it saw by path (non-empty directories too, for comparing), in path order.

    `complete` is False when it stopped at its bound or could not read a directory: nothing after `last` is
    known then, nor anything under a directory it could not read (`unread`)."""

    entries: dict[str, Entry] = field(default_factory=dict)
    complete: bool = True
    last: tuple[bytes, ...] = ()
    unread: list[tuple[bytes, ...]] = field(default_factory=list)

    def covers(self, path: str) -> bool:
        """Whether the walk reached where `path` is: what it did not find there is gone."""
        parts = _parts(path)
        if any(parts[: len(top)] == top and len(parts) > len(top) for top in self.unread):
            return False
        return self.complete or parts <= self.last

    def cut(self, parts: tuple[bytes, ...]) -> None:
        """The directory at `parts` could not be read: what is under it is not known."""
        self.unread.append(parts)
        self.complete = False


def _listed(dfd: int | None, name: bytes | str) -> tuple[int, list[bytes]] | None:
    """A directory's descriptor (never through a link) and its names in order, or None when it cannot be read."""
    try:
        fd = os.open(name, DIR_FLAGS | os.O_NOFOLLOW, dir_fd=dfd)
    except OSError:
        return None
    try:
        return fd, _names(fd)
    except OSError:
        os.close(fd)
        return None


def walk(workspace: str, limit: int | None = None) -> Walk:
    """Every entry under `workspace`, depth first in path order, at most `limit` (MAX_ENTRIES); only lstat."""
    limit = MAX_ENTRIES if limit is None else limit
    out = Walk()
    if not os.path.lexists(workspace):
        return out  # no workspace: nothing in it
    top = _listed(None, workspace)
    if top is None:
        out.cut(())
        return out
    stack = [(top[0], (), iter(top[1]))]
    try:
        while stack:
            fd, prefix, names = stack[-1]
            name = next(names, None)
            if name is None:
                os.close(fd)
                stack.pop()
                continue
            if len(out.entries) >= limit:
                out.complete = False
                break
            parts = (*prefix, name)
            path = os.fsdecode(b"/".join(parts))
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if not stat.S_ISDIR(st.st_mode):
                    out.entries[path] = _described(fd, name, path, st)
                    out.last = parts
                    continue
            except OSError:
                continue  # gone while walked
            out.last = parts
            below = _listed(fd, name)
            if below is None:
                out.cut(parts)
                out.entries[path] = _described(fd, name, path, st)
            elif below[1]:
                stack.append((below[0], parts, iter(below[1])))
                out.entries[path] = _described(fd, name, path, st)
            else:
                os.close(below[0])
                out.entries[path] = _described(fd, name, path, st, empty=True)
    finally:
        for fd, _, _ in stack:
            os.close(fd)
    return out


# --- content: hashes and the store ----------------------------------------------------------------------


class Store:
    """The worker's content store of one organization, beside its workspaces: `<root>/.store/<org>/<sha[:2]>/<sha>`."""

    def __init__(self, workspace: str, org: str) -> None:
        self.dir = os.path.join(os.path.dirname(os.path.dirname(workspace)), ".store", plain_name(org, "org"))

    def path(self, sha: str) -> str:
        return os.path.join(self.dir, sha[:2], sha)

    def has(self, sha: str | None) -> bool:
        return bool(sha) and os.path.isfile(self.path(sha))

    def read(self, sha: str | None, limit: int = -1) -> bytes | None:
        """Kept content (at most `limit` bytes), or None when it is not kept."""
        if not sha:
            return None
        try:
            with open(self.path(sha), "rb") as fh:
                return fh.read(limit)
        except OSError:
            return None

    def put(self, sha: str, data: bytes) -> None:
        """Keep `data` under its hash: written to a temporary name, then renamed, so no half file is ever kept."""
        final = self.path(sha)
        if os.path.isfile(final):
            return
        os.makedirs(os.path.dirname(final), mode=0o700, exist_ok=True)
        tmp = f"{final}.in-{os.getpid()}-{threading.get_ident()}"
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
            os.replace(tmp, final)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise


# (workspace, path, identity) → (sha256, kept, not_kept): a bash step's report reads only what changed.
_hashes: OrderedDict[tuple, tuple[str, bool, str]] = OrderedDict()
_hashes_lock = threading.Lock()
HASHES_KEPT = 50_000


def hashed(workspace: str, entry: Entry, store: Store) -> Entry:
    """`entry` with its sha256 (a regular file up to HASH_MAX) and its content kept in `store` (up to KEEP_MAX)."""
    if entry.kind != "file" or entry.sha256 or entry.not_kept:
        return entry  # nothing to read, or read already
    if entry.size > HASH_MAX:
        return replace(entry, not_kept="hash_too_large")
    known = (workspace, entry.path, *entry.identity)
    with _hashes_lock:
        remembered = _hashes.get(known)
    if remembered is not None and (not remembered[1] or store.has(remembered[0])):
        sha, kept, not_kept = remembered
        return replace(entry, sha256=sha, kept=kept, not_kept=not_kept)
    try:
        fd = _open_file(workspace, entry.path)
    except OSError:
        return replace(entry, not_kept="unreadable")
    try:
        st = os.fstat(fd)
        age = time.time_ns() - st.st_ctime_ns
        if age < RACY_NS:
            time.sleep((RACY_NS - age) / 1e9)
            st = os.fstat(fd)
        digest, content, size = hashlib.sha256(), [], 0
        while chunk := os.read(fd, CHUNK):
            digest.update(chunk)
            size += len(chunk)
            if size <= KEEP_MAX:
                content.append(chunk)
    except OSError:
        return replace(entry, not_kept="unreadable")
    finally:
        os.close(fd)
    entry = replace(entry, size=size, mtime_ns=st.st_mtime_ns, ctime_ns=st.st_ctime_ns, ino=st.st_ino & (2**63 - 1))
    sha, kept, not_kept = digest.hexdigest(), False, "large"
    if size <= KEEP_MAX:
        try:
            store.put(sha, b"".join(content))
            kept, not_kept = True, ""
        except OSError:
            not_kept = "store_error"
    if size == st.st_size:
        with _hashes_lock:
            _hashes[(workspace, entry.path, *entry.identity)] = (sha, kept, not_kept)
            while len(_hashes) > HASHES_KEPT:
                _hashes.popitem(last=False)
    return replace(entry, sha256=sha, kept=kept, not_kept=not_kept)


def _read_small(workspace: str, path: str) -> bytes | None:
    """The regular file's content when it is at most DIFF_MAX bytes; None otherwise."""
    try:
        fd = _open_file(workspace, path)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(DIFF_MAX + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) <= DIFF_MAX else None


# --- step completions -----------------------------------------------------------------------------------


def step_report(
    workspace: str, org: str, tool: str, args: Any, files: Iterable[Any] | None, ok: bool, *, label: str
) -> dict | None:
    """The completion's `workspace`: the entries a step changed, read now; None when the step changes no file.

    The paths: `files`, plus `args["path"]` of a `file_write` / `file_edit` that succeeded; `bash` (succeeded
    or not) reports the whole walk (`scan_all`), bounded (`complete` False when cut short). A named path with
    nothing there any more is `gone` (after `bash` the server drops what the complete walk did not list)."""
    named = list(files or [])
    if ok and tool in FILE_TOOLS and isinstance(args, Mapping):
        named.append(args.get("path"))
    paths = list(dict.fromkeys(p for p in map(clean_path, named) if p is not None))
    scan_all = tool == "bash"
    if not paths and not scan_all:
        return None
    found: dict[str, Entry] = {}
    gone: list[str] = []
    complete = True
    if scan_all:
        disk = walk(workspace)
        found, complete = {p: e for p, e in disk.entries.items() if e.listed}, disk.complete
    for path in paths:
        if path in found:
            continue
        entry = entry_at(workspace, path)
        if entry is None:
            if not scan_all:
                gone.append(path)
        elif entry.listed:
            found[path] = entry
    store = Store(workspace, org)
    return {
        "root": workspace,
        "label": label,
        "entries": [hashed(workspace, e, store).wire() for e in found.values()],
        "gone": [payloads.encode(p) for p in gone],
        "scan_all": scan_all,
        "complete": complete,
    }


# --- comparing with a manifest --------------------------------------------------------------------------


@dataclass(frozen=True)
class Difference:
    path: str
    status: str  # changed | added | missing
    recorded: Entry | None
    actual: Entry | None  # a file's hashed (and kept) when it was read


def _status(workspace: str, store: Store, r: Entry, a: Entry) -> tuple[str, Entry]:
    if r.kind != a.kind:
        return CHANGED, a
    if a.kind == "file":
        if r.ctime_ns and r.identity == a.identity:
            return SAME, a  # the very file recorded: a person cannot set a ctime back
        if r.size != a.size:
            return CHANGED, a
        a = hashed(workspace, a, store)
        return (SAME if r.sha256 and a.sha256 == r.sha256 else CHANGED), a
    if a.kind in ("link", "device"):
        return (SAME if r.link == a.link else CHANGED), a
    return SAME, a


def compare(workspace: str, manifest: Iterable[Any], store: Store) -> tuple[list[Difference], int, Walk]:
    """The differences between a manifest (ENTRY wire forms) and the disk, in path order; how many entries were
    compared; the walk. A recorded entry beyond the walk's reach is neither there nor gone: it is left out."""
    recorded = {e.path: e for e in map(Entry.from_wire, manifest) if e is not None}
    disk = walk(workspace)
    out, checked = [], 0
    for path in sorted(set(recorded) | set(disk.entries), key=_parts):
        r, a = recorded.get(path), disk.entries.get(path)
        if (r is None and not a.listed) or (a is None and not disk.covers(path)):
            continue
        checked += 1
        if r is None:
            status = ADDED
        elif a is None:
            status = MISSING
        else:
            status, a = _status(workspace, store, r, a)
        if status != SAME:
            out.append(Difference(path, status, r, hashed(workspace, a, store) if a is not None else None))
    return out, checked, disk


def _text(data: bytes) -> str | None:
    if len(data) > DIFF_MAX or b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def unified_diff(path: str, old: bytes | None, new: bytes | None) -> str | None:
    """The unified diff from the recorded content to the workspace's (None: a side that does not exist), or None
    when a side is not UTF-8 text without NUL of at most DIFF_MAX bytes."""
    a, b = _text(old or b""), _text(new or b"")
    if a is None or b is None:
        return None
    name = payloads.readable(path)
    lines = difflib.unified_diff(
        a.splitlines(keepends=True),
        b.splitlines(keepends=True),
        fromfile=f"recorded/{name}" if old is not None else "/dev/null",
        tofile=f"workspace/{name}" if new is not None else "/dev/null",
    )
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def _item(workspace: str, store: Store, d: Difference) -> dict:
    """One difference as a validation report lists it, with its diff or why there is none."""
    item = {"path": payloads.encode(d.path), "status": d.status, "recorded": _wire(d.recorded)}
    item.update(actual=_wire(d.actual), diff=None)
    kinds = {e.kind for e in (d.recorded, d.actual) if e is not None}
    if "link" in kinds:
        item["diff_note"] = "link"
    elif kinds - {"file", "dir"}:
        item["diff_note"] = "special"
    elif kinds == {"file"}:
        old = store.read(d.recorded.sha256, DIFF_MAX + 1) if d.recorded is not None else None
        if d.recorded is not None and old is None:
            item["diff_note"] = "not_kept"
            return item
        new = _read_small(workspace, d.path) if d.actual is not None else None
        if d.actual is not None and new is None:
            item["diff_note"] = "binary_or_large"
            return item
        item["diff"] = unified_diff(d.path, old, new)
        if item["diff"] is None:
            item["diff_note"] = "binary_or_large"
    return item


def validate(workspace: str, org: str, manifest: Iterable[Any], *, label: str) -> dict:
    """The validation report (without its epoch): how the workspace differs from the manifest, file by file."""
    store = Store(workspace, org)
    diffs, checked, disk = compare(workspace, manifest, store)
    report = {
        "root": workspace,
        "label": label,
        "checked": checked,
        "complete": disk.complete,
        "files": [_item(workspace, store, d) for d in diffs[:LISTED]],
    }
    if len(diffs) > LISTED:
        report["more"] = len(diffs) - LISTED
    return report


# --- repairs --------------------------------------------------------------------------------------------


def _write_new(top: str, path: str, source: Any, mtime_ns: int | None = None) -> str:
    """Write what `source` (a binary file object) holds to the new file `top/path` (never over an existing one,
    never through a link) and return its sha256. An identical file already there (a repeated job) is taken."""
    parts = _parts(path)
    dfd = _open_dir(top, parts[:-1], create=True)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(parts[-1], flags, 0o600, dir_fd=dfd)
        except FileExistsError:
            sha = _sha_of(source)
            there = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
            with os.fdopen(there, "rb") as fh:
                if _sha_of(fh) != sha:
                    raise FileExistsError(f"{payloads.readable(path)} exists under {top} with other content") from None
            return sha
        digest = hashlib.sha256()
        with os.fdopen(fd, "wb") as out:
            while chunk := source.read(CHUNK):
                digest.update(chunk)
                out.write(chunk)
            out.flush()
            if mtime_ns is not None:
                os.utime(out.fileno(), ns=(mtime_ns, mtime_ns))
        return digest.hexdigest()
    finally:
        os.close(dfd)


def _sha_of(source: Any) -> str:
    digest = hashlib.sha256()
    while chunk := source.read(CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


def _remake(top: str, entry: Entry) -> None:
    """Make a link (its target, never followed), an empty directory or a FIFO at `top/entry.path`."""
    parts = _parts(entry.path)
    dfd = _open_dir(top, parts[:-1], create=True)
    try:
        if entry.kind == "link":
            os.symlink(os.fsencode(entry.link or ""), parts[-1], dir_fd=dfd)
        elif entry.kind == "dir":
            os.mkdir(parts[-1], 0o700, dir_fd=dfd)
        else:
            os.mkfifo(parts[-1], 0o600, dir_fd=dfd)
    finally:
        os.close(dfd)


def _fresh_dir(parent: str, base: str) -> str:
    """A new, empty directory `parent/base` (`base-2`, … when taken): an existing one is never reused."""
    os.makedirs(parent, mode=0o700, exist_ok=True)
    for n in range(1, 1000):
        path = os.path.join(parent, base if n == 1 else f"{base}-{n}")
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"no free directory name for {base} under {parent}")


def reconcile(workspace: str, org: str, job: Mapping[str, Any]) -> dict:
    """A reconcile job: `{"ok", "result"}`. Each difference is adopted, or held when the remaining plan changes
    it (`plan_changes`: a step with `all`, or naming its path) or the disk's file is older than the recorded one
    (`older`). A held regular file is copied to `<workspace>.held/<hint>/<path>`; nothing is moved or deleted."""
    store = Store(workspace, org)
    diffs, checked, _ = compare(workspace, job.get("manifest") or [], store)
    plan = [
        (step.get("seq"), bool(step.get("all")), {clean_path(p) for p in step.get("paths") or []})
        for step in job.get("plan") or []
        if isinstance(step, Mapping)
    ]
    held_dir = os.path.join(f"{workspace}.held", plain_name(job.get("hint"), "hint"))
    adopted, held, held_files, remaining = [], [], [], []
    for d in diffs:
        r, a = d.recorded, d.actual
        seqs = [seq for seq, every, paths in plan if every or d.path in paths]
        side = {"path": payloads.encode(d.path), "status": d.status}
        if seqs:
            reason = "plan_changes"
        elif d.status == CHANGED and r.kind == a.kind == "file" and a.mtime_ns < r.mtime_ns:
            reason = "older"
        else:
            adopted.append({**side, "before": _wire(r), "after": _wire(a)})
            continue
        copy = None
        if a is not None and a.kind == "file":
            os.makedirs(held_dir, mode=0o700, exist_ok=True)
            try:
                with os.fdopen(_open_file(workspace, d.path), "rb") as source:
                    sha = _write_new(held_dir, d.path, source, a.mtime_ns)
            except OSError:
                pass  # gone or replaced since it was compared: listed, not copied
            else:
                copy = payloads.encode(os.path.join(held_dir, d.path))
                held_files.append({"path": side["path"], "sha256": sha, "size": a.size, "why": reason})
        held.append({**side, "reason": reason, "seqs": seqs, "before": _wire(r), "after": _wire(a), "copy": copy})
        remaining.append(_item(workspace, store, d))
    result = {
        "root": workspace,
        "checked": checked,
        "adopted": adopted,
        "held": held,
        "held_copy": held_dir if held_files else None,
        "held_files": held_files,
        "remaining": remaining,
    }
    return {"ok": True, "result": result}


def reissue(workspace: str, root: str, job: Mapping[str, Any]) -> dict:
    """A reissue job: `{"ok", "result"}`, or `{"ok": False, "error"}` when a manifest file's content is not in
    the store (`content_not_kept`: nothing is made then).

    A new directory `<workspace>.reissue-<hint>` is built from the manifest: files from the store with their
    recorded mtime, links, empty directories and FIFOs made again; sockets and devices listed in `not_remade`.
    The old directory is left as it is; how it differed from the manifest is in `kept_differences`."""
    store = Store(workspace, org_of(job.get("workspace_key")))
    manifest = job.get("manifest") or []
    entries = sorted(
        (e for e in map(Entry.from_wire, manifest) if e is not None), key=lambda e: (e.kind != "file", _parts(e.path))
    )
    lost = [e.path for e in entries if e.kind == "file" and not store.has(e.sha256)]
    if lost:
        named = ", ".join(payloads.readable(p) for p in lost[:5]) + (
            f" and {len(lost) - 5} more" if len(lost) > 5 else ""
        )
        detail = f"{len(lost)} file(s) cannot be rebuilt: their recorded content is not kept on this worker ({named})."
        files = [payloads.encode(p) for p in lost[:100]]
        return {"ok": False, "error": {"code": "content_not_kept", "detail": detail, "files": files}, "result": {}}
    diffs, checked, _ = compare(workspace, manifest, store)
    hint = plain_name(job.get("hint"), "hint")
    fresh = _fresh_dir(os.path.dirname(workspace), f"{os.path.basename(workspace)}.reissue-{hint}")
    key = os.path.relpath(fresh, root)
    key_parts(key)  # the new directory is under the holder's root, as the old one was
    rebuilt, not_remade, made = [], [], []
    # Files first: every write makes its parents, and a link made later never stands where a file goes.
    for e in entries:
        if e.kind == "file":
            with open(store.path(e.sha256), "rb") as source:
                sha = _write_new(fresh, e.path, source, e.mtime_ns)
            if sha != e.sha256:
                raise ValueError(f"{payloads.readable(e.path)}: the kept content no longer matches its sha256")
            rebuilt.append({"path": payloads.encode(e.path), "kind": e.kind, "sha256": sha, "size": e.size})
        elif e.kind in REMADE:
            _remake(fresh, e)
            rebuilt.append({"path": payloads.encode(e.path), "kind": e.kind, "link": _wire_link(e.link)})
        else:
            not_remade.append({"path": payloads.encode(e.path), "kind": e.kind})
            continue
        now = entry_at(fresh, e.path)
        if now is not None:
            made.append(hashed(fresh, now, store).wire())
    kept = [
        {
            "path": payloads.encode(d.path),
            "status": d.status,
            "sha256": d.actual.sha256 if d.actual else None,
            "why": d.status,
        }
        for d in diffs
    ]
    result = {
        "root": fresh,
        "workspace_key": key,
        "old_root": workspace,
        "checked": checked,
        "rebuilt": rebuilt,
        "not_remade": not_remade,
        "kept_differences": kept,
        "entries": made,
    }
    return {"ok": True, "result": result}


# --- exports --------------------------------------------------------------------------------------------


def export(workspace: str, destination: str, hint: Any) -> dict:
    """An export job: copy every regular file of the workspace to `destination` on this worker: `{"ok",
    "result", "error"?}` (`error`: in words, what stopped it; `result` says what was done up to there).

    A destination file with the same content is left (`unchanged`); one with other content is copied to
    `<workspace>.held/<hint>/` first (`kept`), then replaced; links and special files are listed (`skipped`),
    never followed; something other than a regular file standing where a file goes stops the export."""
    result: dict[str, Any] = {"checked": 0, "copied": [], "unchanged": [], "kept": [], "skipped": []}
    disk = walk(workspace)
    if not disk.complete:
        return {
            "ok": False,
            "result": result,
            "error": f"The workspace holds more than {disk.limit} entries or a "
            "directory this worker cannot read; nothing was copied, so the destination never holds part of it.",
        }
    files = [e for _, e in sorted(disk.entries.items()) if e.kind != "dir"]
    result["checked"] = len(files)
    held_dir = os.path.join(f"{workspace}.held", plain_name(hint, "hint"))
    held_files: list[dict] = []
    try:
        os.makedirs(destination, mode=0o755, exist_ok=True)
        if os.path.islink(destination) or not os.path.isdir(destination):
            raise NotADirectoryError(f"The export destination {destination} is not a directory.")
        for e in files:
            path = payloads.encode(e.path)
            if e.kind != "file":
                result["skipped"].append({"path": path, "why": e.kind, "link": _wire_link(e.link)})
                continue
            there = entry_at(destination, e.path)
            if there is not None and there.kind != "file":
                raise FileExistsError(f"{payloads.readable(e.path)}: the destination holds a link or special file "
                                      "there; it is never followed or replaced.")  # fmt: skip
            with os.fdopen(_open_file(workspace, e.path), "rb") as source:
                sha = _sha_of(source)
            before = None
            if there is not None:
                with os.fdopen(_open_file(destination, e.path), "rb") as old:
                    before = _sha_of(old)
                if before == sha:
                    result["unchanged"].append({"path": path, "sha256": sha})
                    continue
                os.makedirs(held_dir, mode=0o700, exist_ok=True)
                with os.fdopen(_open_file(destination, e.path), "rb") as old:
                    _write_new(held_dir, e.path, old)  # kept before it is replaced
                held_files.append({"path": path, "sha256": before, "size": there.size, "why": "replaced"})
                copy = payloads.encode(os.path.join(held_dir, e.path))
                result["kept"].append({"path": path, "sha256": before, "copy": copy})
            after = _replace(workspace, destination, e.path)
            if after != sha:
                raise ValueError(f"{payloads.readable(e.path)}: the copy at the destination does not match.")
            result["copied"].append({"path": path, "size": e.size, "before": before, "after": after})
    except (OSError, ValueError) as exc:
        return {"ok": False, "result": _held(result, held_dir, held_files), "error": str(exc)}
    return {"ok": True, "result": _held(result, held_dir, held_files)}


def _held(result: dict, held_dir: str, held_files: list[dict]) -> dict:
    if held_files:
        result.update(held_copy=held_dir, held_files=held_files)
    return result


def _replace(workspace: str, destination: str, path: str) -> str:
    """Copy the workspace's file to `destination/path` through a new file renamed into place (never written
    through a link); returns the sha256 written."""
    parts = _parts(path)
    dfd = _open_dir(destination, parts[:-1], create=True)
    try:
        temp = b".console-export-" + os.urandom(6).hex().encode()
        with os.fdopen(_open_file(workspace, path), "rb") as source:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dfd)
            digest = hashlib.sha256()
            with os.fdopen(fd, "wb") as out:
                while chunk := source.read(CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
        os.rename(temp, parts[-1], src_dir_fd=dfd, dst_dir_fd=dfd)
        return digest.hexdigest()
    finally:
        os.close(dfd)


def _wire_link(link: str | None) -> Any:
    return payloads.encode(link) if link is not None else None
