"""A task's workspace on disk: a safe walk, content hashes, a content store, and the manifest.

The manifest (`WorkspaceFile` rows) says, for every file of a task's workspace,
its size, mtime, sha256 and the step that wrote it. It is updated in the
transaction that completes a file-changing step, from what the *server* reads
on disk, never from what a worker claims: the server and every worker see a
workspace under the same absolute path (one machine, or a shared filesystem) —
the claim already hands the worker that path. A worker may name the files a
step changed (`files` in the complete body); the server reads them itself.

Safety: a workspace path is relative, normalized, and never leaves the
workspace; no symbolic link is ever followed (each component is opened with
`O_NOFOLLOW` from the workspace's own directory descriptor); a symlink found on
disk is reported as a link, never read through; FIFOs and devices are never
opened for reading.

The content store keeps every recorded version of a file (up to
`CONSOLE_WORKSPACE_KEEP_BYTES`) by its sha256 under
`<CONSOLE_WORKSPACES>/.store/<org>/`, so validation can show a diff and an
isolated reissue can rebuild a workspace from recorded content.
"""

from __future__ import annotations

import errno
import hashlib
import os
import posixpath
import re
import stat
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

MAX_PATH = 1000
MAX_FILES = 50_000  # a scan stops here; more than this is not a workspace an agent keeps
CHUNK = 1024 * 1024
SHA_RE = re.compile(r"^[0-9a-f]{64}$")
FILE_TOOLS = ("file_write", "file_edit")


class UnsafePath(ValueError):
    """A workspace path that is absolute, leaves the workspace, or is not a plain relative path."""


def clean_relpath(value) -> str:
    """The normalized workspace-relative form of `value`, or UnsafePath."""
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_PATH:
        raise UnsafePath(f"not a workspace path: {value!r}"[:200])
    if "\x00" in value:
        raise UnsafePath("a workspace path must not contain NUL bytes")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UnsafePath("a workspace path must be valid UTF-8") from exc
    if value.startswith("/"):
        raise UnsafePath(f"path is absolute: {value!r}"[:200])
    norm = posixpath.normpath(value)
    if norm in (".", "..") or norm.startswith("../"):
        raise UnsafePath(f"path leaves the workspace: {value!r}"[:200])
    return norm


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


def _open_dir(root: str, parts: list[str], *, create: bool = False) -> int:
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
    """Open `root/rel` without following a symlink anywhere below `root`. OSError(ELOOP) if one is there."""
    parts = rel.split("/")
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


# --- hashing -----------------------------------------------------------------------------

_cache: OrderedDict[tuple, str] = OrderedDict()
_cache_lock = threading.Lock()
CACHE_SIZE = 20_000


def _cache_key(st: os.stat_result) -> tuple:
    # ctime cannot be set by a user: any write to the file changes it.
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _sha_of_fd(fd: int, st: os.stat_result, sink=None) -> str:
    key = _cache_key(st)
    if sink is None:
        with _cache_lock:
            cached = _cache.get(key)
            if cached is not None:
                _cache.move_to_end(key)
                return cached
    h = hashlib.sha256()
    while chunk := os.read(fd, CHUNK):
        h.update(chunk)
        if sink is not None:
            sink.write(chunk)
    digest = h.hexdigest()
    with _cache_lock:
        _cache[key] = digest
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return digest


@dataclass(frozen=True)
class OnDisk:
    """One entry found on disk. `kind`: "file", "link" (never followed) or "other" (FIFO, device, odd name)."""

    path: str
    kind: str
    size: int = 0
    mtime_ns: int = 0
    sha256: str | None = None
    link: str | None = None


def file_entry(root: str | Path, rel: str, *, with_hash: bool = True) -> OnDisk | None:
    """What is at `rel` now: a file (hashed), a link, something else, or None when nothing is there."""
    try:
        dfd = _open_dir(str(root), rel.split("/")[:-1])
    except OSError:
        # A directory on the way is missing, a file, or a symbolic link (never followed).
        parts = rel.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            if os.path.islink(os.path.join(str(root), *parts[:i])):
                return OnDisk(rel, "link", link=f"(through the symbolic link {'/'.join(parts[:i])})")
        return None
    try:
        st = os.stat(rel.split("/")[-1], dir_fd=dfd, follow_symlinks=False)
    except OSError:
        return None
    finally:
        os.close(dfd)
    if stat.S_ISLNK(st.st_mode):
        return OnDisk(rel, "link", link=_readlink(root, rel))
    if not stat.S_ISREG(st.st_mode):
        return OnDisk(rel, "other", mtime_ns=st.st_mtime_ns)
    if not with_hash:
        return OnDisk(rel, "file", st.st_size, st.st_mtime_ns)
    opened = open_regular(root, rel)
    if opened is None:
        return None
    fd, st = opened
    try:
        return OnDisk(rel, "file", st.st_size, st.st_mtime_ns, _sha_of_fd(fd, st))
    finally:
        os.close(fd)


def _readlink(root, rel: str) -> str:
    try:
        return os.readlink(os.path.join(str(root), rel))
    except OSError:
        return "?"


def scan(root: str | Path, *, with_hash: bool = True) -> dict[str, OnDisk]:
    """Every entry under `root` by relative path. Links (to files or directories) are reported, never entered."""
    root = str(root)
    found: dict[str, OnDisk] = {}
    if not os.path.isdir(root) or os.path.islink(root):
        return found
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel_dir = os.path.relpath(dirpath, root)
        for name in sorted(dirnames):
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                rel = _rel(rel_dir, name)
                found[rel] = OnDisk(rel, "link", link=_readlink(root, rel))
        for name in sorted(filenames):
            rel = _rel(rel_dir, name)
            try:
                rel.encode("utf-8")
            except UnicodeEncodeError:
                shown = rel.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
                found[shown] = OnDisk(shown, "other")
                continue
            entry = file_entry(root, rel, with_hash=with_hash)
            if entry is not None:
                found[rel] = entry
            if len(found) >= MAX_FILES:
                return found
    return found


def _rel(rel_dir: str, name: str) -> str:
    return name if rel_dir == "." else f"{rel_dir}/{name}".replace(os.sep, "/")


# --- the content store ---------------------------------------------------------------------


def keep_limit() -> int:
    return int(settings.CONSOLE_WORKSPACE_KEEP_BYTES)


def store_root(org_slug: str) -> Path:
    return Path(settings.CONSOLE_WORKSPACES).resolve() / ".store" / org_slug


def store_path(org_slug: str, sha: str) -> Path:
    if not isinstance(sha, str) or not SHA_RE.match(sha):
        raise UnsafePath(f"not a sha256: {sha!r}"[:100])
    return store_root(org_slug) / sha[:2] / sha


def store_has(org_slug: str, sha: str) -> bool:
    return store_path(org_slug, sha).is_file()


def store_read(org_slug: str, sha: str, *, limit: int | None = None) -> bytes | None:
    """Recorded content by hash (at most `limit` bytes), or None when it was not kept."""
    path = store_path(org_slug, sha)
    try:
        with open(path, "rb") as fh:
            return fh.read(limit) if limit is not None else fh.read()
    except OSError:
        return None


def keep(org_slug: str, root: str | Path, rel: str) -> tuple[OnDisk, bool] | None:
    """Read the regular file at `rel` once: hash it and keep its content in the store (when small enough).

    Returns (entry, kept) or None when no regular file is there.
    """
    opened = open_regular(root, rel)
    if opened is None:
        return None
    fd, st = opened
    try:
        if st.st_size > keep_limit():
            return OnDisk(rel, "file", st.st_size, st.st_mtime_ns, _sha_of_fd(fd, st)), False
        target_dir = store_root(org_slug)
        target_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=target_dir, prefix=".in-", delete=False) as tmp:
            sha = _sha_of_fd(fd, st, sink=tmp)
        final = store_path(org_slug, sha)
        final.parent.mkdir(parents=True, exist_ok=True)
        if final.exists():
            os.unlink(tmp.name)
        else:
            os.replace(tmp.name, final)
        return OnDisk(rel, "file", st.st_size, st.st_mtime_ns, sha), True
    finally:
        os.close(fd)


# --- writing (repairs, exports) ------------------------------------------------------------


def write_file(root: str | Path, rel: str, source, *, mtime_ns: int | None = None, exclusive: bool = False) -> str:
    """Write the bytes read from `source` (a file object) to `root/rel` without following links.

    The content goes to a temporary file in the same directory first and is
    renamed into place, so a reader never sees half a file. `exclusive`
    refuses to replace an existing file. Returns the sha256 of what was written.
    """
    parts = rel.split("/")
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
        tmp_name = f".{parts[-1][:100]}.console-{os.getpid()}-{threading.get_ident()}.tmp"
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


def manifest_record(*, task, step=None, paths=(), scan_all: bool = False, forget_missing=(), source: str = "step"):
    """Update the task's manifest from disk, in the caller's transaction. Returns the paths recorded or dropped.

    `paths`: files to record as they are now (a path with no regular file is
    left as it was: the step did not delete it). `forget_missing`: paths the
    writer says it changed; one that is gone is dropped from the manifest.
    `scan_all`: read the whole workspace (after `bash`): new and changed files
    are recorded, files gone are dropped; a file whose size and mtime match its
    record is not read again.
    """
    from tasks.models import WorkspaceFile

    root = task.workspace
    if not root or not os.path.isdir(root):
        return []
    slug = task.org.slug
    rows = {r.path: r for r in WorkspaceFile.objects.filter(task=task)}
    changed: list[str] = []
    writer = {
        "step": step,
        "run_id_seen": step.run_id if step is not None else None,
        "seq": step.seq if step is not None else None,
        "tool": step.tool if step is not None else "",
        "source": source,
    }

    def record(rel: str) -> None:
        kept = keep(slug, root, rel)
        if kept is None:
            return
        entry, is_kept = kept
        row = rows.get(rel)
        if row is not None and row.sha256 == entry.sha256 and row.size == entry.size:
            if row.mtime_ns != entry.mtime_ns:
                WorkspaceFile.objects.filter(pk=row.pk).update(mtime_ns=entry.mtime_ns)
            return
        rows[rel], _ = WorkspaceFile.objects.update_or_create(
            task=task,
            path=rel,
            defaults={
                "size": entry.size,
                "mtime_ns": entry.mtime_ns,
                "sha256": entry.sha256,
                "kept": is_kept,
                **writer,
            },
        )
        changed.append(rel)

    def drop(rel: str) -> None:
        if rows.pop(rel, None) is not None:
            WorkspaceFile.objects.filter(task=task, path=rel).delete()
            changed.append(rel)

    if scan_all:
        disk = scan(root, with_hash=False)
        for rel, entry in disk.items():
            row = rows.get(rel)
            if entry.kind != "file":
                drop(rel)  # a link or a special file is never recorded: validation lists it
            elif row is None or row.size != entry.size or row.mtime_ns != entry.mtime_ns:
                record(rel)
        for rel in list(rows):
            if rel not in disk:
                drop(rel)
    for rel in paths:
        record(rel)
    for rel in forget_missing:
        if file_entry(root, rel, with_hash=False) is None:
            drop(rel)
        else:
            record(rel)
    return changed


def step_paths(tool: str, args) -> tuple[list[str], bool]:
    """The files a completed step of `tool` wrote (unsafe paths are skipped), and whether to scan the workspace."""
    if tool == "bash":
        return [], True
    if tool in FILE_TOOLS and isinstance(args, dict):
        try:
            return [clean_relpath(args.get("path"))], False
        except UnsafePath:
            return [], False
    return [], False
