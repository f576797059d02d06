"""A task's workspace on disk: a bounded walk, content hashes, a content store, and the manifest.

The manifest (`WorkspaceFile` rows) says, for every entry of a task's
workspace, what it is — a regular file (size, times, sha256), a symbolic link
(its target, never followed), a directory (recorded when empty: a non-empty one
is implied by its entries), a FIFO, a socket or a device — and the step that
wrote it. It is updated when a file-changing step completes, from what the
*server* reads on disk, never from what a worker claims: the server and every
worker see a workspace under the same absolute path (one machine, or a shared
filesystem) — the claim already hands the worker that path.

Names are bytes on disk. A name that is UTF-8 text is stored as itself; any
other is stored as "/" followed by its JSON escape form (a relative path never
starts with "/", so the two never meet) and shown in its wire form,
`{"$text": "<escape form>"}` (tasks.payloads), in the API and on pages.

Bounds, so no request, transaction or supervisor pass waits on the disk:
- a walk stops after `CONSOLE_WORKSPACE_MAX_ENTRIES` entries in path order and
  says where (`Scan.complete`, `Scan.covers`): what lies beyond is neither
  recorded nor taken as deleted;
- content is read only outside transactions (`Hasher` with a `Budget` of bytes
  per request or pass); a file over `CONSOLE_WORKSPACE_HASH_MAX_BYTES` is never
  read: it is recorded and compared by size, times and inode, which a person
  cannot set back (`ctime`);
- inside a transaction only `lstat` and hashes read before it are used, and an
  entry is stat'ed again before it is written, so a file that changed since it
  was hashed is never recorded with the old hash.

Safety: a workspace path is relative, normalized, and never leaves the
workspace; no symbolic link is ever followed (each component is opened with
`O_NOFOLLOW` from the workspace's own directory descriptor); FIFOs and devices
are never opened.

The content store keeps every recorded version of a file (up to
`CONSOLE_WORKSPACE_KEEP_BYTES`) by its sha256 under
`<CONSOLE_WORKSPACES>/.store/<org>/`, so validation can show a diff and an
isolated reissue can rebuild a workspace from recorded content. A store that
cannot be written does not stop anything: the file is recorded as not kept,
with the reason.
"""

from __future__ import annotations

import errno
import hashlib
import itertools
import json
import os
import posixpath
import re
import stat
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from pathlib import Path

from django.conf import settings

from tasks import payloads

MAX_PATH = 4096  # bytes of a path a worker may name (Linux's PATH_MAX)
MAX_KEY = 2000  # bytes of a stored path: what one unique-index entry holds on PostgreSQL
CHUNK = 1024 * 1024
SHA_RE = re.compile(r"^[0-9a-f]{64}$")
FILE_TOOLS = ("file_write", "file_edit")
MAX_DEPTH = 256  # directories deeper than this are not walked (listed as unread)
# A file changed this recently may change again within the same tick of the kernel's clock without its
# ctime moving; its identity is read again after this long, so an identity once recorded is trustworthy.
RACY_NS = 50_000_000

FILE, LINK, DIR, FIFO, SOCKET, DEVICE, OTHER = "file", "link", "dir", "fifo", "socket", "device", "other"
KINDS = (FILE, LINK, DIR, FIFO, SOCKET, DEVICE, OTHER)

# Why a file's content was not kept (WorkspaceFile.not_kept; recovery/words/workspaces.py says each in words).
LARGE = "large"  # over CONSOLE_WORKSPACE_KEEP_BYTES: hashed, not kept
STORE_ERROR = "store_error"  # the content store could not be written
UNREADABLE = "unreadable"  # the server could not read the file
HASH_TOO_LARGE = "hash_too_large"  # over CONSOLE_WORKSPACE_HASH_MAX_BYTES: never read
HASH_BUDGET = "hash_budget"  # the request's or pass's hashing budget was spent
CHANGED_WHILE_READ = "changed_while_read"  # it changed while it was being read: recorded by size and times
NOT_READ = "not_read"  # no hash was read ahead of the transaction that recorded it


class UnsafePath(ValueError):
    """A workspace path that is absolute, leaves the workspace, or is not a plain relative path."""


def max_entries() -> int:
    return int(settings.CONSOLE_WORKSPACE_MAX_ENTRIES)


def hash_max() -> int:
    return int(settings.CONSOLE_WORKSPACE_HASH_MAX_BYTES)


def hash_budget() -> int:
    # Never less than the largest file read: a fresh budget can always read any file that is read at all.
    return max(hash_max(), int(settings.CONSOLE_WORKSPACE_HASH_BUDGET))


def keep_limit() -> int:
    return int(settings.CONSOLE_WORKSPACE_KEEP_BYTES)


# --- names: bytes on disk, text in the database ---------------------------------------------


def key_of(name: str) -> str:
    """The stored form of a relative path (`name`: text, undecodable bytes as surrogateescape)."""
    if payloads.is_plain(name):
        return name
    return "/" + json.dumps(name, ensure_ascii=True)[1:-1]


def name_of(key: str) -> str:
    """The path a stored key names, as Python's os functions take it (surrogateescape for raw bytes)."""
    if key.startswith("/"):
        return json.loads(f'"{key[1:]}"')
    return key


def wire(key: str):
    """A stored path as the API and pages show it: the path itself, or `{"$text": …}` for bytes that are not text."""
    return payloads.encode(name_of(key))


def shown(key: str) -> str:
    """A stored path as one line of text (a sentence, a table cell): the wire form's JSON for odd names."""
    return key if not key.startswith("/") else json.dumps(wire(key), ensure_ascii=False)


def fs_path(key: str) -> bytes:
    return os.fsencode(name_of(key))


def _parts(key: str) -> tuple[bytes, ...]:
    return tuple(fs_path(key).split(b"/"))


def clean_relpath(value) -> str:
    """The stored key of the normalized workspace-relative path `value`, or UnsafePath.

    `value` is text (a lone surrogate U+DC80 to U+DCFF standing for the raw byte it escapes, as Python spells
    undecodable file names), or its wire form `{"$text": …}`.
    """
    if isinstance(value, dict):
        try:
            value = payloads.decode(value)
        except payloads.PayloadError as exc:
            raise UnsafePath(f"not a workspace path: {exc}") from None
    if not isinstance(value, str) or not value.strip():
        raise UnsafePath(f"not a workspace path: {value!r}"[:200])
    if "\x00" in value:
        raise UnsafePath("a workspace path must not contain NUL bytes")
    try:
        raw = value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as exc:
        raise UnsafePath("a workspace path holds a lone surrogate that stands for no byte") from exc
    if len(raw) > MAX_PATH:
        raise UnsafePath(f"a workspace path holds at most {MAX_PATH} bytes")
    if value.startswith("/"):
        raise UnsafePath(f"path is absolute: {value!r}"[:200])
    norm = posixpath.normpath(value)
    if norm in (".", "..") or norm.startswith("../"):
        raise UnsafePath(f"path leaves the workspace: {value!r}"[:200])
    return key_of(norm)


URL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def destination_problem(dest, *, exporting: bool = True) -> str | None:
    """Why `dest` cannot be an export destination, or None.

    A local destination must be an absolute path without `..`, outside the
    workspaces directory, through no symbolic link (it is written through,
    never followed). Checked when a task is created and again at every export.
    A URL (`s3://…`) may be saved with a task; this console exports to local
    (or mounted) directories only, so exporting to one fails and says so.
    """
    if not isinstance(dest, str) or not dest.strip():
        return "The task has no export destination."
    if "\x00" in dest:
        return "The export destination contains a NUL byte."
    if URL_RE.match(dest):
        if not exporting:
            return None
        return (
            f"The export destination {dest} is not a local directory: this console exports to local (or mounted) "
            "directories only."
        )
    if not os.path.isabs(dest):
        return f"The export destination must be an absolute path, not {dest!r}."
    if any(part == ".." for part in dest.split("/")):
        return f"The export destination must not contain '..': {dest!r}."
    norm = os.path.normpath(dest)
    workspaces = str(Path(settings.CONSOLE_WORKSPACES).resolve())
    if os.path.commonpath([workspaces, norm]) == workspaces:
        return f"The export destination {dest} is inside the workspaces directory; it would copy into itself."
    path = "/"
    for part in [p for p in norm.split("/") if p]:
        path = os.path.join(path, part)
        if os.path.islink(path):
            return f"The export destination passes through the symbolic link {path}, which is never followed."
        if not os.path.exists(path):
            break
    return None


# --- opening without following links -------------------------------------------------------


def _open_dir(root, parts, *, create: bool = False) -> int:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in parts:
            if create:
                try:
                    os.mkdir(name, 0o777, dir_fd=fd)
                except FileExistsError:
                    pass
            nfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_nofollow(root: str | Path, rel: str, flags: int = os.O_RDONLY, *, create_dirs: bool = False) -> int:
    """Open `root/rel` (a stored key) without following a symlink anywhere below `root`; never blocks."""
    parts = _parts(rel)
    dfd = _open_dir(str(root), parts[:-1], create=create_dirs)
    try:
        return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o666, dir_fd=dfd)
    finally:
        os.close(dfd)


def open_regular(root: str | Path, rel: str) -> tuple[int, os.stat_result] | None:
    """A read descriptor on a regular file at `rel` and its stat, or None (missing, a link, not a file)."""
    try:
        fd = open_nofollow(root, rel)
    except OSError:
        return None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return None
    os.set_blocking(fd, True)
    return fd, st


# --- what is on disk -------------------------------------------------------------------------


@dataclass(frozen=True)
class OnDisk:
    """One entry found on disk (its `lstat`), and what was read of it.

    `sha256` is None until a `Hasher` read the file (or when it could not);
    `not_kept` says why its content is not in the store ("" when it is, or when
    it is not a file). `link`: a link's target (text, surrogateescape) or a
    device's number. `empty`: a directory with nothing in it.
    """

    path: str
    kind: str
    size: int = 0
    mtime_ns: int = 0
    ctime_ns: int = 0
    ino: int = 0
    sha256: str | None = None
    link: str | None = None
    empty: bool = False
    kept: bool = False
    not_kept: str = ""
    detail: str = ""

    @property
    def identity(self) -> tuple:
        return (self.size, self.mtime_ns, self.ctime_ns, self.ino)


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return FILE
    if stat.S_ISLNK(mode):
        return LINK
    if stat.S_ISDIR(mode):
        return DIR
    if stat.S_ISFIFO(mode):
        return FIFO
    if stat.S_ISSOCK(mode):
        return SOCKET
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return DEVICE
    return OTHER


def _ino(st: os.stat_result) -> int:
    return st.st_ino & (2**63 - 1)  # a 64-bit column; inode numbers are unsigned


def _entry(key: str, st: os.stat_result, *, link: str | None = None, empty: bool = False) -> OnDisk:
    kind = _kind(st.st_mode)
    if kind == DEVICE:
        link = f"{'char' if stat.S_ISCHR(st.st_mode) else 'block'} {os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
    size = st.st_size if kind == FILE else 0
    return OnDisk(key, kind, size, st.st_mtime_ns, st.st_ctime_ns, _ino(st), link=link, empty=empty)


@dataclass
class Scan:
    """A walk of a workspace in path order (components compared as bytes), at most `limit` entries.

    `complete` is False when the walk stopped at its limit; `last` is then the
    last entry it saw, and nothing after it in path order is known. Entries
    under a directory it could not read (`unread`) are not known either.
    `too_long` counts entries whose stored path would exceed MAX_KEY bytes (never recorded).
    """

    entries: dict[str, OnDisk] = field(default_factory=dict)
    complete: bool = True
    last: tuple[bytes, ...] | None = None
    unread: list[tuple[bytes, ...]] = field(default_factory=list)
    too_long: int = 0
    limit: int = 0
    exists: bool = True

    def covers(self, key: str) -> bool:
        """Whether the walk saw where `key` is: it is there or it is gone, not merely beyond the walk."""
        if self.complete and not self.unread:
            return True
        parts = _parts(key)
        for prefix in self.unread:
            if parts[: len(prefix)] == prefix and len(parts) > len(prefix):
                return False
        if self.complete:
            return True
        return self.last is not None and parts <= self.last

    @property
    def last_key(self) -> str | None:
        return key_of(os.fsdecode(b"/".join(self.last))) if self.last else None


def _listing(fd: int) -> list[bytes]:
    return sorted(os.fsencode(n) for n in os.listdir(fd))


def scan(root: str | Path, *, limit: int | None = None) -> Scan:
    """Every entry under `root` by stored key, in path order, at most `limit` (`CONSOLE_WORKSPACE_MAX_ENTRIES`).

    Only `lstat`: no file is opened or read, no link followed, no FIFO opened.
    """
    limit = max_entries() if limit is None else limit
    out = Scan(limit=limit)
    try:
        top = os.open(str(root), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        out.exists = False
        return out
    stack: list[tuple[int, tuple[bytes, ...], list[bytes], int]] = []
    try:
        try:
            stack.append((top, (), _listing(top), 0))
        except OSError:
            os.close(top)
            out.unread.append(())
            return out
        while stack:
            fd, prefix, names, i = stack[-1]
            if i >= len(names):
                os.close(fd)
                stack.pop()
                continue
            stack[-1] = (fd, prefix, names, i + 1)
            name = names[i]
            parts = (*prefix, name)
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            except OSError:
                out.unread.append(parts)
                continue
            key = key_of(os.fsdecode(b"/".join(parts)))
            if len(key.encode("utf-8")) > MAX_KEY:
                out.too_long += 1
                continue
            if len(out.entries) >= limit:
                out.complete = False
                break
            if stat.S_ISDIR(st.st_mode):
                children: list[bytes] | None = None
                sub = -1
                if len(parts) < MAX_DEPTH:
                    try:
                        sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                        children = _listing(sub)
                    except OSError:
                        if sub >= 0:
                            os.close(sub)
                        sub = -1
                out.entries[key] = _entry(key, st, empty=children == [])
                out.last = parts
                if children is None:
                    out.unread.append(parts)
                elif children:
                    stack.append((sub, parts, children, 0))
                else:
                    os.close(sub)
                continue
            link = None
            if stat.S_ISLNK(st.st_mode):
                try:
                    link = os.fsdecode(os.readlink(name, dir_fd=fd))
                except OSError:
                    link = "?"
            out.entries[key] = _entry(key, st, link=link)
            out.last = parts
    finally:
        for fd, *_ in stack:
            os.close(fd)
    if out.complete:
        out.last = None
    return out


def entry_at(root: str | Path, key: str, *, way: bool = False) -> OnDisk | None:
    """What is at `key` now (its lstat), or None. With `way`, a symbolic link on the way there is reported as a
    link (never followed); otherwise there is nothing at `key` that the workspace holds as such."""
    parts = _parts(key)
    try:
        dfd = _open_dir(str(root), parts[:-1])
    except OSError:
        if not way:
            return None
        # A directory on the way is missing, a file, or a symbolic link (never followed).
        for i in range(1, len(parts)):
            try:
                st = os.stat(b"/".join((os.fsencode(str(root)), *parts[:i])), follow_symlinks=False)
            except OSError:
                return None
            if stat.S_ISLNK(st.st_mode):
                way = key_of(os.fsdecode(b"/".join(parts[:i])))
                return OnDisk(key, LINK, link=f"(through the symbolic link {shown(way)})")
        return None
    try:
        st = os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
        link, empty = None, False
        if stat.S_ISLNK(st.st_mode):
            link = os.fsdecode(os.readlink(parts[-1], dir_fd=dfd))
        elif stat.S_ISDIR(st.st_mode):
            try:
                sub = os.open(parts[-1], os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
                try:
                    empty = not os.listdir(sub)
                finally:
                    os.close(sub)
            except OSError:
                pass
    except OSError:
        return None
    finally:
        os.close(dfd)
    return _entry(key, st, link=link, empty=empty)


# --- hashing -----------------------------------------------------------------------------

_cache: OrderedDict[tuple, str] = OrderedDict()
_cache_lock = threading.Lock()
CACHE_SIZE = 50_000


def _cache_key(root, key: str, ident: tuple) -> tuple:
    return (str(root), key, *ident)


def _cached(ck: tuple) -> str | None:
    with _cache_lock:
        sha = _cache.get(ck)
        if sha is not None:
            _cache.move_to_end(ck)
        return sha


def _remember(ck: tuple, sha: str) -> None:
    with _cache_lock:
        _cache[ck] = sha
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)


@dataclass
class Budget:
    """What a request or a supervisor pass may spend on workspaces: bytes of content read
    (`CONSOLE_WORKSPACE_HASH_BUDGET`) and entries walked (four full walks)."""

    left: int = -1
    entries: int = -1
    spent: bool = False  # something was left unread because the budget ran out

    def __post_init__(self):
        if self.left < 0:
            self.left = hash_budget()
        if self.entries < 0:
            self.entries = 4 * max_entries()

    def take(self, n: int) -> bool:
        if n > self.left:
            self.spent = True
            return False
        self.left -= n
        return True


def _st_identity(st: os.stat_result) -> tuple:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, _ino(st))


class Hasher:
    """Reads files for their sha256 — only outside transactions — keeping small ones in the content store.

    `budget` None reads nothing: only hashes read earlier (in this process, for
    this very identity) are used. `keep_in`: the organization whose content
    store receives files up to CONSOLE_WORKSPACE_KEEP_BYTES as they are read.
    """

    def __init__(self, *, budget: Budget | None, keep_in: str | None = None):
        self.budget = budget
        self.keep_in = keep_in
        self._store = str(store_root(keep_in)) if keep_in else None
        self._made: set[str] = set()

    def _kept(self, sha: str) -> bool:
        return self._store is not None and os.path.isfile(f"{self._store}/{sha[:2]}/{sha}")

    def fill(self, root, e: OnDisk) -> OnDisk:
        if e.kind != FILE:
            return e
        ck = _cache_key(root, e.path, e.identity)
        sha = _cached(ck)
        small = e.size <= keep_limit()
        if sha is not None:
            kept = small and self._kept(sha)
            if kept or not small or not self.keep_in or self.budget is None:
                return replace(e, sha256=sha, kept=kept, not_kept="" if kept else (LARGE if not small else NOT_READ))
        if self.budget is None:
            return replace(e, sha256=None, not_kept=NOT_READ)
        if e.size > hash_max():
            return replace(_settled(root, e), sha256=None, not_kept=HASH_TOO_LARGE)
        if not self.budget.take(e.size):
            return replace(_settled(root, e), sha256=None, not_kept=HASH_BUDGET)
        return self._read(root, e)

    def _read(self, root, e: OnDisk) -> OnDisk:
        try:
            fd = open_nofollow(root, e.path)
        except OSError as exc:
            return replace(e, sha256=None, not_kept=UNREADABLE, detail=exc.strerror or str(exc))
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return replace(e, sha256=None, not_kept=CHANGED_WHILE_READ)
            age = time.time_ns() - st.st_ctime_ns
            if age < RACY_NS:
                time.sleep((RACY_NS - age) / 1e9)
                st = os.fstat(fd)
            os.set_blocking(fd, True)
            e = replace(e, size=st.st_size, mtime_ns=st.st_mtime_ns, ctime_ns=st.st_ctime_ns, ino=_ino(st))
            # A file small enough to keep is held in memory while it is hashed (at most KEEP_BYTES), and
            # written to the store only when its content is not there yet.
            limit = keep_limit() if self._store is not None and st.st_size <= keep_limit() else -1
            h = hashlib.sha256()
            parts: list[bytes] | None = [] if limit >= 0 else None
            held = 0
            while chunk := os.read(fd, CHUNK):
                h.update(chunk)
                if parts is not None:
                    held += len(chunk)
                    if held <= limit:
                        parts.append(chunk)
                    else:
                        parts = None  # it grew past what is kept while it was read
            after = os.fstat(fd)
        except OSError as exc:
            return replace(e, sha256=None, not_kept=UNREADABLE, detail=exc.strerror or str(exc))
        finally:
            os.close(fd)
        if _st_identity(after) != e.identity:
            return replace(e, sha256=None, not_kept=CHANGED_WHILE_READ)
        sha = h.hexdigest()
        _remember(_cache_key(root, e.path, e.identity), sha)
        if parts is None:
            return replace(e, sha256=sha, kept=False, not_kept=LARGE if self._store is not None else NOT_READ)
        error = self._put(sha, parts)
        if error is not None:
            return replace(e, sha256=sha, kept=False, not_kept=STORE_ERROR, detail=error)
        return replace(e, sha256=sha, kept=True, not_kept="")

    def _put(self, sha: str, parts: list[bytes]) -> str | None:
        """Keep content under its hash (written to a temporary name, then renamed); None, or the error."""
        folder = f"{self._store}/{sha[:2]}"
        final = f"{folder}/{sha}"
        tmp = f"{folder}/.in-{os.getpid()}-{threading.get_ident()}-{next(_tmp_names)}"
        try:
            if os.path.isfile(final):
                return None
            if folder not in self._made:
                os.makedirs(folder, exist_ok=True)
                self._made.add(folder)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            try:
                for part in parts:
                    os.write(fd, part)
            finally:
                os.close(fd)
            os.replace(tmp, final)
            return None
        except OSError as exc:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return exc.strerror or str(exc)


_tmp_names = itertools.count()


def _settled(root, e: OnDisk) -> OnDisk:
    """`e`, stat'ed again once its ctime is older than the kernel clock's tick: an identity it is then recorded
    with changes with any later write."""
    age = time.time_ns() - e.ctime_ns
    if age >= RACY_NS:
        return e
    time.sleep((RACY_NS - age) / 1e9)
    now = entry_at(root, e.path)
    return now if now is not None and now.kind == e.kind else e


def file_sha(root, key: str) -> str | None:
    """The sha256 of the regular file at `key`, read in full (exports, which copy every byte anyway)."""
    opened = open_regular(root, key)
    if opened is None:
        return None
    fd, _st = opened
    h = hashlib.sha256()
    try:
        while chunk := os.read(fd, CHUNK):
            h.update(chunk)
    finally:
        os.close(fd)
    return h.hexdigest()


def file_entry(root: str | Path, rel: str, *, with_hash: bool = True) -> OnDisk | None:
    """What is at `rel` now, a regular file's content hashed in full when `with_hash` (exports only)."""
    e = entry_at(root, rel, way=True)
    if e is None or e.kind != FILE or not with_hash:
        return e
    sha = file_sha(root, rel)
    return None if sha is None else replace(e, sha256=sha)


def read_ahead(
    root, *, known: dict[str, tuple] | None, budget: Budget | None, keep_in: str | None, limit: int | None = None
) -> Scan:
    """Walk `root` and read the files whose identity differs from `known` (stored key → identity), within `budget`.

    Done outside any transaction; what it returns is used inside one without
    reading content again. A file whose identity matches its record is not read.
    """
    limit = max_entries() if limit is None else limit
    if budget is not None and budget.entries < limit:
        budget.spent = True  # a walk cut short by the budget would compare less than the workspace holds
        return Scan(complete=False, limit=0)
    found = scan(root, limit=limit)
    if budget is not None:
        budget.entries -= len(found.entries)
    hasher = Hasher(budget=budget, keep_in=keep_in)
    for key, e in list(found.entries.items()):
        if e.kind != FILE:
            continue
        if known is not None and known.get(key) == e.identity and e.ctime_ns:
            continue
        found.entries[key] = hasher.fill(root, e)
    return found


# --- the content store ---------------------------------------------------------------------


def store_root(org_slug: str) -> Path:
    return Path(settings.CONSOLE_WORKSPACES).resolve() / ".store" / org_slug


def store_path(org_slug: str, sha: str) -> Path:
    if not isinstance(sha, str) or not SHA_RE.match(sha):
        raise UnsafePath(f"not a sha256: {sha!r}"[:100])
    return store_root(org_slug) / sha[:2] / sha


def store_has(org_slug: str, sha: str) -> bool:
    try:
        return store_path(org_slug, sha).is_file()
    except (UnsafePath, OSError):
        return False


def store_read(org_slug: str, sha: str, *, limit: int | None = None) -> bytes | None:
    """Recorded content by hash (at most `limit` bytes), or None when it was not kept."""
    try:
        path = store_path(org_slug, sha)
        with open(path, "rb") as fh:
            return fh.read(limit) if limit is not None else fh.read()
    except (OSError, UnsafePath):
        return None


# --- writing (repairs, exports) ------------------------------------------------------------


def write_file(root: str | Path, rel: str, source, *, mtime_ns: int | None = None, exclusive: bool = False) -> str:
    """Write the bytes read from `source` (a file object) to `root/rel` without following links.

    The content goes to a temporary file in the same directory first and is
    renamed into place, so a reader never sees half a file. `exclusive`
    refuses to replace an existing file. Returns the sha256 of what was written.
    """
    parts = _parts(rel)
    dfd = _open_dir(str(root), parts[:-1], create=True)
    try:
        if exclusive:
            try:
                os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
                raise FileExistsError(errno.EEXIST, "exists", rel)
            except FileNotFoundError:
                pass
        else:
            try:
                existing = os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
                if not stat.S_ISREG(existing.st_mode):
                    raise IsADirectoryError(errno.EISDIR, "not a regular file", rel)
            except FileNotFoundError:
                pass
        tmp_name = b".%s.console-%d-%d.tmp" % (parts[-1][:100], os.getpid(), threading.get_ident())
        fd = os.open(tmp_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dfd)
        h = hashlib.sha256()
        try:
            with os.fdopen(fd, "wb") as out:
                while chunk := source.read(CHUNK):
                    h.update(chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            if mtime_ns is not None:
                os.utime(tmp_name, ns=(mtime_ns, mtime_ns), dir_fd=dfd, follow_symlinks=False)
            os.replace(tmp_name, parts[-1], src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            try:
                os.unlink(tmp_name, dir_fd=dfd)
            except OSError:
                pass
            raise
        return h.hexdigest()
    finally:
        os.close(dfd)


def make_entry(root: str | Path, rel: str, kind: str, *, link: str | None = None) -> None:
    """Create a link (with `link` as its target, never followed), an empty directory or a FIFO at `rel`."""
    parts = _parts(rel)
    dfd = _open_dir(str(root), parts[:-1], create=True)
    try:
        if kind == LINK:
            os.symlink(os.fsencode(link or ""), parts[-1], dir_fd=dfd)
        elif kind == DIR:
            try:
                os.mkdir(parts[-1], 0o777, dir_fd=dfd)
            except FileExistsError:
                if not stat.S_ISDIR(os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False).st_mode):
                    raise
        elif kind == FIFO:
            os.mkfifo(parts[-1], 0o666, dir_fd=dfd)
        else:
            raise ValueError(f"a {kind} is not made by the console")
    finally:
        os.close(dfd)


def copy_file(src_root: str | Path, rel: str, dst_root: str | Path, dst_rel: str | None = None, **kw) -> str | None:
    """Copy the regular file `src_root/rel` to `dst_root/dst_rel`, links refused on both sides. None if not a file."""
    opened = open_regular(src_root, rel)
    if opened is None:
        return None
    fd, st = opened
    with os.fdopen(fd, "rb") as src:
        return write_file(dst_root, dst_rel or rel, src, mtime_ns=kw.pop("mtime_ns", st.st_mtime_ns), **kw)


def make_fresh_dir(parent: Path, base: str) -> Path:
    """Create a new, empty directory `parent/base` (or `base-2`, `base-3` … when taken); never reuse one."""
    parent.mkdir(parents=True, exist_ok=True)
    for n in range(1, 10_000):
        path = parent / (base if n == 1 else f"{base}-{n}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"no free directory name for {base} under {parent}")


# --- the manifest ----------------------------------------------------------------------------


def row_identity(row) -> tuple:
    return (row.size, row.mtime_ns, row.ctime_ns, row.ino)


def row_matches(row, e: OnDisk) -> bool:
    """Whether the record says exactly what is on disk, without reading content: same kind and, for a file, the
    same size, times and inode (the ctime a person cannot set back); for a link or device, the same target."""
    if row.kind != e.kind:
        return False
    if e.kind == FILE:
        return bool(row.ctime_ns) and row_identity(row) == e.identity
    if e.kind in (LINK, DEVICE):
        return _link_text(row.link) == e.link
    return True


def _link_text(value) -> str | None:
    if value is None:
        return None
    try:
        decoded = payloads.decode(value)
    except payloads.PayloadError:
        return None
    return decoded if isinstance(decoded, str) else None


def manifest_identities(task) -> dict[str, tuple]:
    from tasks.models import WorkspaceFile

    return {
        p: (size, mtime, ctime, ino)
        for p, size, mtime, ctime, ino in WorkspaceFile.objects.filter(task=task, kind=FILE).values_list(
            "path", "size", "mtime_ns", "ctime_ns", "ino"
        )
    }


@dataclass
class Recorded:
    """What a manifest update did: keys recorded or dropped, files not kept (with why), and the walk's bounds."""

    changed: list[str] = field(default_factory=list)
    not_kept: list[OnDisk] = field(default_factory=list)
    scan: Scan | None = None

    def __iter__(self):
        return iter(self.changed)

    def __len__(self):
        return len(self.changed)

    def notes(self, limit: int = 20) -> dict:
        """The step's `workspace_notes`: which files were not kept and why, and whether the walk was cut short."""
        out: dict = {}
        if self.not_kept:
            out["not_kept"] = [
                {"path": wire(e.path), "why": e.not_kept, **({"detail": e.detail} if e.detail else {})}
                for e in self.not_kept[:limit]
            ]
            out["not_kept_count"] = len(self.not_kept)
        if self.scan is not None and not self.scan.complete:
            out["scan"] = {"limit": self.scan.limit, "last": wire(self.scan.last_key) if self.scan.last else None}
        if self.scan is not None and self.scan.too_long:
            out["too_long"] = self.scan.too_long
        return out


def manifest_read_ahead(*, task, paths=(), scan_all: bool = False, budget: Budget | None = None) -> Scan | None:
    """Outside any transaction: what a manifest update of `task` will need from disk, content read within `budget`.

    With `scan_all` the whole workspace (a bounded walk); otherwise only `paths`.
    """
    root = task.workspace
    if not root or not os.path.isdir(root):
        return None
    budget = budget if budget is not None else Budget()
    known = manifest_identities(task)
    slug = task.org.slug
    try:
        if scan_all:
            found = read_ahead(root, known=known, budget=budget, keep_in=slug)
        else:
            found = Scan(complete=False, limit=0)
        hasher = Hasher(budget=budget, keep_in=slug)
        for key in paths:
            if key in found.entries:
                continue
            e = entry_at(root, key)
            if e is not None:
                found.entries[key] = hasher.fill(root, e) if known.get(key) != e.identity else e
    except OSError:
        return None
    return found


def manifest_record(
    *,
    task,
    step=None,
    paths=(),
    scan_all: bool = False,
    forget_missing=(),
    source: str = "step",
    disk: Scan | None = None,
) -> Recorded:
    """Update the task's manifest from disk, in the caller's transaction. Returns what changed.

    `paths`: entries to record as they are now (a path with nothing there is
    left as it was: the step did not delete it). `forget_missing`: paths the
    writer says it changed; one that is gone is dropped from the manifest.
    `scan_all`: the whole workspace (after `bash`): new and changed entries are
    recorded, entries gone are dropped — only where the walk reached.
    `disk`: what was read ahead, outside the transaction (manifest_read_ahead);
    without it nothing is read here but `lstat`s, and a changed file is
    recorded by size and times. Every entry is stat'ed again before it is
    written: one that changed since it was read is recorded as it is now,
    without the stale hash.
    """
    from tasks.models import WorkspaceFile

    out = Recorded()
    root = task.workspace
    if not root or not os.path.isdir(root):
        return out
    rows = {r.path: r for r in WorkspaceFile.objects.filter(task=task)}
    found = disk if disk is not None else Scan(complete=False, limit=0)
    wanted: dict[str, OnDisk] = {}
    drops: set[str] = set()

    def consider(key: str, e: OnDisk) -> None:
        row = rows.get(key)
        if e.kind == DIR and not e.empty and (row is None or row.kind == DIR):
            return  # a directory with entries is implied by them; a recorded one stays recorded
        if row is None or not row_matches(row, e):
            wanted[key] = e

    if scan_all:
        if disk is None or disk.limit == 0:
            found = scan(root)
            found.entries.update({k: v for k, v in (disk.entries if disk else {}).items() if k in found.entries})
        out.scan = found
        for key, e in found.entries.items():
            consider(key, e)
        for key in rows:
            if key not in found.entries and found.covers(key):
                drops.add(key)
    for key in paths:
        e = found.entries.get(key) or entry_at(root, key)
        if e is not None:
            consider(key, e)
    for key in forget_missing:
        e = found.entries.get(key) or entry_at(root, key)
        if e is None:
            drops.add(key)
        else:
            consider(key, e)
    _write(task, step, source, rows, wanted, drops, out)
    return out


def _restat(root, keys) -> dict[str, OnDisk | None]:
    """The lstat of each key now (None: nothing there), each parent directory opened once."""
    out: dict[str, OnDisk | None] = {}
    by_parent: dict[tuple[bytes, ...], list[tuple[str, bytes]]] = {}
    for key in keys:
        parts = _parts(key)
        by_parent.setdefault(parts[:-1], []).append((key, parts[-1]))
    for parent, items in by_parent.items():
        try:
            dfd = _open_dir(str(root), parent)
        except OSError:
            out.update((key, None) for key, _ in items)
            continue
        try:
            for key, name in items:
                try:
                    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                    link, empty = None, False
                    if stat.S_ISLNK(st.st_mode):
                        link = os.fsdecode(os.readlink(name, dir_fd=dfd))
                    elif stat.S_ISDIR(st.st_mode):
                        sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
                        try:
                            empty = not os.listdir(sub)
                        finally:
                            os.close(sub)
                    out[key] = _entry(key, st, link=link, empty=empty)
                except OSError:
                    out[key] = None
        finally:
            os.close(dfd)
    return out


def _fresh(e: OnDisk, now: OnDisk | None) -> OnDisk | None:
    """`e` checked again just before it is written: the same entry, or what is there now (without a hash)."""
    if now is None:
        return None
    if now.kind == e.kind and now.identity == e.identity and now.link == e.link:
        return replace(e, empty=now.empty)
    if now.kind == FILE:
        return replace(now, not_kept=CHANGED_WHILE_READ)
    return now


# The manifest's columns as one upsert writes them (a workspace may add tens of thousands of entries in one
# step: executemany, not one statement per row or the ORM's per-value compilation, while the run is locked).
_UPSERT_FIELDS = (
    "task", "path", "kind", "size", "mtime_ns", "ctime_ns", "ino", "sha256", "link", "kept", "not_kept",
    "not_kept_detail", "step", "run_id_seen", "seq", "tool", "source", "recorded_at",
)  # fmt: skip
_IDENTITY_FIELDS = ("size", "mtime_ns", "ctime_ns", "ino", "recorded_at")
_EVERY_FIELD = tuple(f for f in _UPSERT_FIELDS if f not in ("task", "path"))


def _upsert(values: list[tuple], update: tuple[str, ...]) -> None:
    from django.db import connection

    from tasks.models import WorkspaceFile

    if not values:
        return
    meta = WorkspaceFile._meta
    column = {name: meta.get_field(name).column for name in _UPSERT_FIELDS}
    sql = (
        f"INSERT INTO {meta.db_table} ({', '.join(column[f] for f in _UPSERT_FIELDS)}) "  # noqa: S608
        f"VALUES ({', '.join(['%s'] * len(_UPSERT_FIELDS))}) "
        f"ON CONFLICT ({column['task']}, {column['path']}) DO UPDATE SET "
        + ", ".join(f"{column[f]} = excluded.{column[f]}" for f in update)
    )
    with connection.cursor() as cursor:
        for i in range(0, len(values), 1000):
            cursor.executemany(sql, values[i : i + 1000])


def _write(task, step, source: str, rows: dict, wanted: dict[str, OnDisk], drops: set[str], out: Recorded) -> None:
    from django.db import connection
    from django.utils import timezone

    from tasks.models import WorkspaceFile

    root = task.workspace
    meta = WorkspaceFile._meta
    now = meta.get_field("recorded_at").get_db_prep_save(timezone.now(), connection)
    link_field = meta.get_field("link")
    writer = (
        step.pk if step is not None else None,
        step.run_id if step is not None else None,
        step.seq if step is not None else None,
        step.tool if step is not None else "",
        source,
    )
    hasher = Hasher(budget=None, keep_in=task.org.slug)
    full: list[tuple] = []
    same_content: list[tuple] = []
    current = _restat(root, wanted)
    for key, e in wanted.items():
        e = _fresh(e, current.get(key))
        if e is None:
            continue
        if e.kind == FILE and e.sha256 is None and not e.not_kept:
            e = hasher.fill(root, e)  # a hash read earlier in this process, if any
        row = rows.get(key)
        if e.kind == DIR and not e.empty and row is None:
            continue
        if row is not None and e.kind == FILE == row.kind and e.sha256 and (row.sha256, row.size) == (e.sha256, e.size):
            # The same content with new times: only the identity moves; the writer stays who wrote it.
            same_content.append(
                (task.pk, key, FILE, e.size, e.mtime_ns, e.ctime_ns, e.ino, row.sha256, None, row.kept, "", "",
                 None, None, None, "", source, now)
            )  # fmt: skip
            continue
        kept = e.kind == FILE and e.kept
        link = link_field.get_db_prep_save(payloads.encode(e.link), connection) if e.link is not None else None
        full.append(
            (task.pk, key, e.kind, e.size, e.mtime_ns, e.ctime_ns, e.ino, e.sha256 or "", link, kept,
             e.not_kept if e.kind == FILE and not kept else "",
             (e.detail or "")[:300] if e.kind == FILE and not kept else "",
             *writer, now)
        )  # fmt: skip
        out.changed.append(key)
        if e.kind == FILE and not kept:
            out.not_kept.append(e)
    _upsert(same_content, _IDENTITY_FIELDS)
    _upsert(full, _EVERY_FIELD)
    gone = sorted(k for k in drops if k in rows)
    for i in range(0, len(gone), 500):
        WorkspaceFile.objects.filter(task=task, path__in=gone[i : i + 500]).delete()
    out.changed.extend(gone)


def manifest_rebuilt(*, task, keys) -> None:
    """After an isolated reissue rebuilt `keys` in the task's (fresh) workspace: their new inodes and times are
    recorded; content, targets and writers stay as recorded (the rebuild wrote exactly those)."""
    from django.utils import timezone

    from tasks.models import WorkspaceFile

    now = timezone.now()
    objs = []
    for key in keys:
        e = entry_at(task.workspace, key)
        if e is None:
            continue
        objs.append(
            WorkspaceFile(
                task=task, path=key, kind=e.kind, size=e.size, mtime_ns=e.mtime_ns, ctime_ns=e.ctime_ns, ino=e.ino,
                recorded_at=now,
            )
        )  # fmt: skip
    if objs:
        WorkspaceFile.objects.bulk_create(
            objs,
            batch_size=500,
            update_conflicts=True,
            unique_fields=["task", "path"],
            update_fields=["size", "mtime_ns", "ctime_ns", "ino", "recorded_at"],
        )


def step_paths(tool: str, args) -> tuple[list[str], bool]:
    """The stored keys a completed step of `tool` wrote (unsafe paths skipped), and whether to walk the workspace."""
    if tool == "bash":
        return [], True
    if tool in FILE_TOOLS and isinstance(args, dict):
        try:
            return [clean_relpath(args.get("path"))], False
        except UnsafePath:
            return [], False
    return [], False
