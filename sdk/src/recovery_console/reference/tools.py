"""The reference worker's real tools, run inside one task workspace (moved here from `tasks/worker/tools.py`).

Pure of Django so it can be tested alone. Every tool takes a `ToolContext` and
its arguments, and returns a JSON-serializable dict; a refusal or failure is a
`ToolError` (the executor records it as a failed step).

Path safety: every path argument is relative to the workspace and may not leave
it. A path is checked twice: lexically (no absolute path, no `..` escape) and
physically (`os.path.realpath` must stay under the workspace's real path, so a
symlink — file or directory, anywhere along the path — that points outside is
refused). Files are then opened by walking the *resolved* path one component at
a time from the workspace directory with `O_NOFOLLOW`, so a symlink swapped in
after the check makes the open fail instead of escaping.

`bash` is the exception by design: it is a shell started with the workspace as
its working directory, and a shell can reach anything the worker's OS user can.
Confinement of `bash` is the job of the OS (a dedicated user, a container), not
of this module. It does get an environment without the worker's credentials.

Bounds: every call is bounded in time and in what it holds in memory. Files
are opened with `O_NONBLOCK` and used only when `fstat` says they are regular
files (a FIFO, a socket or a device is refused at once, never waited on); a
read keeps at most OUTPUT_LIMIT bytes and says how many more there were;
`bash` keeps at most OUTPUT_LIMIT bytes of each of its outputs and counts the
rest; `fetch` and `http_post` end after HTTP_TIMEOUT in all. After a Stop a
tool may go on for `ToolContext.stop_grace` seconds (the worker's drain time
less the margin it needs to finish), then it is cut short and records no
outcome, so a Stop ends a run within the drain time whatever the tool does.
"""

from __future__ import annotations

import errno
import json
import math
import os
import selectors
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from recovery_console.errors import Interrupted
from recovery_console.errors import ToolError as StepError

BASH_DEFAULT_TIMEOUT = 60.0
BASH_MAX_TIMEOUT = 600.0
OUTPUT_LIMIT = 1024 * 1024  # bytes kept of a command's stdout/stderr, of a file read and of an HTTP body
EDIT_LIMIT = 16 * 1024 * 1024  # the largest file `file_edit` reads whole
STATE_LIMIT = 16 * 1024 * 1024  # the largest todo or memory file
LIST_LIMIT = 10_000  # paths `list_files` returns; the rest are counted
LIST_WALK_LIMIT = 200_000  # entries `list_files` looks at in all
READ_CHUNK = 1024 * 1024
HTTP_TIMEOUT = 30.0  # for one whole request: connecting, sending and reading the body
SLEEP_MAX = 3600.0
STATE_DIR = ".console"
TODO_FILE = f"{STATE_DIR}/todo.json"
MEMORY_FILE = f"{STATE_DIR}/memory.json"

# Never hand the worker's own credentials or fault switches to a command it runs.
_SCRUBBED_ENV = ("CONSOLE_WORKER_TOKEN", "WORKER_FAULT", "SECRET_KEY", "DATABASE_URL")


class ToolError(StepError):
    """A tool refused or failed; the message is saved as the step's error."""


class ToolInterrupted(ToolError, Interrupted):
    """The tool gave up because the run was asked to stop (or lost its lease), or the worker's drain time ran out."""


# How often a long tool looks at its context's events.
WATCH_SECONDS = 0.1


@dataclass
class ToolContext:
    workspace: str
    # Set when the run must stop; long waits (`sleep`) end early when it is, and
    # any other tool is cut short `stop_grace` seconds later.
    cancel: threading.Event = field(default_factory=threading.Event)
    # Set when the worker is shutting down and its drain time is up: every long
    # tool (`sleep`, `bash`) gives up at once, and its step records no outcome.
    abandon: threading.Event = field(default_factory=threading.Event)
    # How long a tool may go on after a stop was asked for (the drain time less its margin).
    stop_grace: float = 8.0
    _cancel_seen: float | None = field(default=None, init=False, repr=False)

    def give_up(self) -> str | None:
        """Why a long tool must give up now (its step records no outcome), or None to go on."""
        if self.abandon.is_set():
            return "the worker is shutting down"
        if self.cancel.is_set():
            now = time.monotonic()
            if self._cancel_seen is None:
                self._cancel_seen = now
            if now - self._cancel_seen >= self.stop_grace:
                return f"the run was asked to stop {self.stop_grace:g} s ago"
        return None


def stop_grace_for(drain_seconds: float) -> float:
    """The time a tool may go on after a Stop: the drain time, less what the worker needs to finish the run
    (the same margin the drain deadline keeps)."""
    drain = float(drain_seconds)
    return max(0.0, drain - min(2.0, drain / 3))


# --- paths -------------------------------------------------------------------


def _escape(path: object) -> ToolError:
    return ToolError(f"path escapes the workspace: {path!r}")


def workspace_root(workspace: str) -> str:
    """The workspace's real path; it must be an existing directory."""
    if not workspace or not os.path.isabs(workspace):
        raise ToolError(f"workspace must be an absolute path, not {workspace!r}")
    root = os.path.realpath(workspace)
    if not os.path.isdir(root):
        raise ToolError(f"workspace {workspace!r} is not a directory")
    return root


def _is_within(root: str, path: str) -> bool:
    return os.path.commonpath([root, path]) == root


def resolve(workspace: str, path: object, *, allow_root: bool = False) -> tuple[str, str]:
    """Check `path` and return (workspace real path, the path's real path under it).

    Raises ToolError("path escapes the workspace: …") for absolute paths, `..`
    escapes and symlinks (anywhere along the path) that resolve outside.
    """
    if not isinstance(path, str):
        raise ToolError(f"path must be a string, not {type(path).__name__}")
    if "\x00" in path:
        raise ToolError("path must not contain NUL bytes")
    if path.strip() in ("", ".") and not allow_root:
        raise ToolError("path must name a file inside the workspace")
    if os.path.isabs(path):
        raise _escape(path)
    root = workspace_root(workspace)
    lexical = os.path.normpath(os.path.join(root, path))
    if not _is_within(root, lexical):
        raise _escape(path)
    # realpath follows every symlink on the way (also a dangling last one), so a
    # link to the outside or `link/..` through one is caught here.
    real = os.path.realpath(os.path.join(root, path))
    if not _is_within(root, real):
        raise _escape(path)
    if real == root and not allow_root:
        raise ToolError(f"path {path!r} is the workspace itself, not a file")
    return root, real


def _parts(root: str, real: str) -> list[str]:
    rel = os.path.relpath(real, root)
    return [] if rel == "." else rel.split(os.sep)


def _open_dir_chain(root: str, dirs: list[str], *, create: bool) -> int:
    """Open the directory `root/dirs…` without following any symlink; optionally creating it."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in dirs:
            if create:
                try:
                    os.mkdir(name, 0o777, dir_fd=fd)
                except FileExistsError:
                    pass
            nfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_file(root: str, real: str, flags: int, *, create_dirs: bool = False) -> int:
    """Open a regular file without following links and without blocking: O_NONBLOCK makes opening a FIFO
    return at once (or fail), and anything but a regular file is refused before it is used."""
    parts = _parts(root, real)
    rel = os.path.relpath(real, root)
    if not parts:
        raise ToolError("path is the workspace itself, not a file")
    try:
        dir_fd = _open_dir_chain(root, parts[:-1], create=create_dirs)
        try:
            fd = os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o666, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            # The resolved path had no symlink, so one appeared after the check.
            raise ToolError(f"path escapes the workspace: {rel!r}") from exc
        if exc.errno == errno.ENXIO:
            raise ToolError(f"{rel}: not a regular file (a FIFO or socket nobody reads)") from exc
        raise ToolError(f"{rel}: {exc.strerror}") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ToolError(f"{rel}: not a regular file ({_kind_of(st.st_mode)})")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _kind_of(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a file"


def _read_bytes(root: str, real: str, limit: int | None = None) -> tuple[bytes, int]:
    """At most `limit` bytes of the regular file at `real` (all of it when None), and its size."""
    fd = _open_file(root, real, os.O_RDONLY)
    with os.fdopen(fd, "rb") as fh:
        size = os.fstat(fd).st_size
        data = fh.read() if limit is None else fh.read(limit)
    return data, max(size, len(data))


def _read_whole(root: str, real: str, limit: int, what: str) -> bytes:
    """The whole file, refused when it is larger than `limit` (nothing is read past it)."""
    data, size = _read_bytes(root, real, limit + 1)
    if len(data) > limit:
        raise ToolError(f"{os.path.relpath(real, root)}: {size} bytes; {what} reads files up to {limit} bytes")
    return data


def _write_bytes(root: str, real: str, data: bytes) -> int:
    # No O_TRUNC: a FIFO or device is refused by fstat before anything is written or truncated.
    fd = _open_file(root, real, os.O_WRONLY | os.O_CREAT, create_dirs=True)
    with os.fdopen(fd, "wb") as fh:
        os.ftruncate(fd, 0)
        fh.write(data)
    return len(data)


def _str_arg(args: Mapping[str, Any], name: str, *, required: bool = True, default: str | None = None) -> str:
    value = args.get(name, default)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise ToolError(f"argument {name!r} must be a string")
    return value


def _os_bytes(value: str | bytes, name: str) -> bytes:
    """Text as UTF-8 for a file or a shell; a lone surrogate U+DC80..U+DCFF stands for the raw byte it escapes
    (Python's `surrogateescape`, as for file names). Other lone surrogates name no byte: refused."""
    if isinstance(value, bytes):
        return value
    try:
        return value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as exc:
        raise ToolError(f"argument {name!r} holds a lone surrogate that stands for no byte: {exc}") from None


def _number_arg(args: Mapping[str, Any], name: str, default: float | None = None) -> float:
    value = args.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ToolError(f"argument {name!r} must be a non-negative number")
    return float(value)


# --- files -------------------------------------------------------------------


def file_read(ctx: ToolContext, args: Mapping[str, Any]) -> dict:
    """The file's content, at most OUTPUT_LIMIT bytes of it; a longer file says how long it is."""
    root, real = resolve(ctx.workspace, _str_arg(args, "path"))
    data, size = _read_bytes(root, real, OUTPUT_LIMIT + 1)
    content, kept = _kept(data, OUTPUT_LIMIT)
    result: dict[str, Any] = {"content": content}
    if size > kept:
        result.update(
            {
                "truncated": True,
                "size": size,
                "note": f"{kept} of {size} bytes read; the rest of the file was not read",
            }
        )
    return result


def list_files(ctx: ToolContext, args: Mapping[str, Any]) -> dict:
    """Files under `path` (default: the whole workspace), as sorted workspace-relative paths.

    Symlinked directories are never descended into; a symlinked file is listed
    only when it resolves inside the workspace. At most LIST_LIMIT paths are
    returned (the rest are counted) and at most LIST_WALK_LIMIT entries looked at.
    """
    root, real = resolve(ctx.workspace, _str_arg(args, "path", required=False) or ".", allow_root=True)
    if not os.path.isdir(real):
        raise ToolError(f"{os.path.relpath(real, root)}: not a directory")
    files: list[str] = []
    count = seen = 0
    stopped = False
    # followlinks=False: a symlinked directory shows up in `dirnames` but is not entered.
    for dirpath, dirnames, filenames in os.walk(real, followlinks=False):
        dirnames.sort()
        seen += len(dirnames) + len(filenames)
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                target = os.path.realpath(full)
                if not (_is_within(root, target) and os.path.isfile(target)):
                    continue
            count += 1
            if len(files) < LIST_LIMIT:
                files.append(os.path.relpath(full, root))
        if seen >= LIST_WALK_LIMIT or ctx.give_up():
            stopped = True
            break
    result: dict[str, Any] = {"files": sorted(files)}
    if count > len(files) or stopped:
        result["truncated"] = True
        result["count"] = count
        result["note"] = f"{len(files)} of {'at least ' if stopped else ''}{count} files listed" + (
            f"; the listing stopped after {seen} entries" if stopped else ""
        )
    return result


def file_write(ctx: ToolContext, args: Mapping[str, Any]) -> dict:
    root, real = resolve(ctx.workspace, _str_arg(args, "path"))
    content = args.get("content")
    # Bytes come from a `{"$bytes": …}` argument (recovery_console.payloads): written as they are.
    if not isinstance(content, str | bytes):
        raise ToolError("argument 'content' must be a string (or bytes)")
    if os.path.isdir(real):
        raise ToolError(f"{os.path.relpath(real, root)}: is a directory")
    return {"bytes": _write_bytes(root, real, _os_bytes(content, "content"))}


def file_edit(ctx: ToolContext, args: Mapping[str, Any]) -> dict:
    """Replace every occurrence of `old` with `new`; `old` must occur."""
    root, real = resolve(ctx.workspace, _str_arg(args, "path"))
    old, new = _str_arg(args, "old"), _str_arg(args, "new")
    if not old:
        raise ToolError("argument 'old' must not be empty")
    try:
        text = _read_whole(root, real, EDIT_LIMIT, "file_edit").decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(f"{os.path.relpath(real, root)}: not a UTF-8 text file") from exc
    count = text.count(old)
    if count == 0:
        raise ToolError(f"{os.path.relpath(real, root)}: text to replace was not found")
    _write_bytes(root, real, text.replace(old, new).encode("utf-8"))
    return {"replaced": count}


# --- processes and the network ----------------------------------------------


def text_or_bytes(data: bytes, encoding: str = "utf-8") -> str | bytes:
    """`data` as text when it is text in `encoding`; otherwise the bytes themselves, kept whole.

    Nothing is replaced: the checkpoint carries bytes as `{"$bytes": …}` (recovery_console.payloads).
    """
    try:
        return data.decode(encoding)
    except (UnicodeDecodeError, LookupError):
        return data


def _kept(data: bytes, limit: int) -> tuple[str | bytes, int]:
    """The first `limit` bytes of `data` as text (or bytes), and how many were kept.

    A cut through a UTF-8 character ends at the last whole one, so text cut short still reads as text.
    """
    cut = bytes(data[:limit])
    if len(data) > limit:
        try:
            cut.decode("utf-8")
        except UnicodeDecodeError as exc:
            if exc.reason == "unexpected end of data" and exc.start >= len(cut) - 3:
                cut = cut[: exc.start]
    return text_or_bytes(cut), len(cut)


def _bash_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in _SCRUBBED_ENV}


class _Output:
    """One of a command's outputs: the first OUTPUT_LIMIT bytes kept, every byte counted."""

    def __init__(self) -> None:
        self.kept = bytearray()
        self.total = 0

    def take(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = OUTPUT_LIMIT + 4 - len(self.kept)  # a few more, to end a cut at a whole character
        if room > 0:
            self.kept.extend(chunk[:room])


def bash(ctx: ToolContext, args: Mapping[str, Any]) -> dict:
    """Run `command` with bash in the workspace. A non-zero exit is a result; a timeout is an error.

    Each of stdout and stderr is read as it comes: the first OUTPUT_LIMIT bytes are kept, the rest is
    counted and discarded (`stdout_bytes`, `stderr_bytes`, `truncated`, `note`), so no output holds the
    worker's memory. A Stop lets the command go on for `ctx.stop_grace` seconds, then kills it.
    """
    command = args.get("command")
    if not isinstance(command, str | bytes):
        raise ToolError("argument 'command' must be a string")
    command = _os_bytes(command, "command")
    if b"\x00" in command:
        raise ToolError("argument 'command' must not contain NUL: a shell command cannot hold one")
    timeout = min(_number_arg(args, "timeout", BASH_DEFAULT_TIMEOUT), BASH_MAX_TIMEOUT)
    if timeout <= 0:
        raise ToolError("argument 'timeout' must be positive")
    root = workspace_root(ctx.workspace)
    # A session of its own, so a timeout kills the command's children too;
    # otherwise a background grandchild would keep the pipes (and us) waiting.
    proc = subprocess.Popen(
        ["bash", "-c", command],
        cwd=root,
        env=_bash_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    started = time.monotonic()
    outputs = {proc.stdout: _Output(), proc.stderr: _Output()}
    try:
        with selectors.DefaultSelector() as sel:
            for pipe in outputs:
                os.set_blocking(pipe.fileno(), False)
                sel.register(pipe, selectors.EVENT_READ)
            while sel.get_map():
                for key, _ in sel.select(WATCH_SECONDS):
                    try:
                        chunk = os.read(key.fd, READ_CHUNK)
                    except BlockingIOError:
                        continue
                    if chunk:
                        outputs[key.fileobj].take(chunk)
                    else:
                        sel.unregister(key.fileobj)
                _watch(ctx, started, timeout)
        while proc.poll() is None:
            _watch(ctx, started, timeout)
            time.sleep(min(WATCH_SECONDS, 0.01))
    except BaseException:
        _kill_group(proc)
        proc.wait()
        raise
    finally:
        for pipe in outputs:
            pipe.close()
    out, err = outputs[proc.stdout], outputs[proc.stderr]
    stdout, out_kept = _kept(out.kept, OUTPUT_LIMIT)
    stderr, err_kept = _kept(err.kept, OUTPUT_LIMIT)
    result: dict[str, Any] = {"exit_code": proc.returncode, "stdout": stdout, "stderr": stderr}
    if out.total > out_kept or err.total > err_kept:
        result["truncated"] = True
        result["stdout_bytes"], result["stderr_bytes"] = out.total, err.total
        said = [
            f"{name}: {kept} of {total} bytes kept, the rest counted and discarded"
            for name, kept, total in (("stdout", out_kept, out.total), ("stderr", err_kept, err.total))
            if total > kept
        ]
        result["note"] = "; ".join(said)
    return result


def _watch(ctx: ToolContext, started: float, timeout: float) -> None:
    """Raise when a running command must end: the worker's drain, a Stop's grace, or its own timeout."""
    why = ctx.give_up()
    if why is not None:
        raise ToolInterrupted(f"bash command cut short after {time.monotonic() - started:.1f} s: {why}")
    if time.monotonic() - started >= timeout:
        raise ToolError(f"bash command timed out after {timeout:g} s")


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _http_url(args: Mapping[str, Any]) -> str:
    url = _str_arg(args, "url")
    if not url.lower().startswith(("http://", "https://")):
        raise ToolError("argument 'url' must be an http:// or https:// URL")
    return url


def _read_response(ctx: ToolContext, request: Callable[[httpx.Client], Any]) -> dict:
    """Send a request and keep at most OUTPUT_LIMIT bytes of the body, within HTTP_TIMEOUT in all.

    The request runs in a thread of its own that this one watches: a server that sends a byte at a time, or
    a Stop, ends it on time whatever the socket does (the thread is told to stop and closes the connection).
    """
    done = threading.Event()
    halt = threading.Event()
    box: dict[str, Any] = {}

    def send() -> None:
        try:
            with httpx.Client(timeout=HTTP_TIMEOUT, follow_redirects=True) as client:
                with request(client) as response:
                    body = bytearray()
                    for chunk in response.iter_bytes():
                        body.extend(chunk)
                        if len(body) > OUTPUT_LIMIT or halt.is_set():
                            break
                    box["body"] = bytes(body)
                    box["encoding"] = response.encoding or "utf-8"
                    box["status"] = response.status_code
                    box["length"] = response.headers.get("content-length")
        except Exception as exc:  # reported to the watching thread, which raises it as the tool's error
            box["error"] = exc
        finally:
            done.set()

    started = time.monotonic()
    threading.Thread(target=send, name="http-tool", daemon=True).start()
    while not done.wait(WATCH_SECONDS):
        why = ctx.give_up()
        if why is not None:
            halt.set()
            raise ToolInterrupted(f"request cut short after {time.monotonic() - started:.1f} s: {why}")
        if time.monotonic() - started >= HTTP_TIMEOUT:
            halt.set()
            raise ToolError(f"request failed: no complete answer within {HTTP_TIMEOUT:g} s")
    if "error" in box:
        exc = box["error"]
        raise ToolError(f"request failed: {type(exc).__name__}: {exc}") from exc
    body = box["body"]
    kept = min(len(body), OUTPUT_LIMIT)
    result: dict[str, Any] = {"status": box["status"], "body": text_or_bytes(body[:kept], box["encoding"])}
    if len(body) > kept:
        result["truncated"] = True
        length = box.get("length")
        result["note"] = (
            f"{kept} bytes of the body kept"
            + (f" of {length}" if isinstance(length, str) and length.isdigit() else "")
            + "; the rest was not read"
        )
    return result


def fetch(ctx: ToolContext, args: Mapping[str, Any]) -> dict:
    url = _http_url(args)
    return _read_response(ctx, lambda client: client.stream("GET", url))


def http_post(ctx: ToolContext, args: Mapping[str, Any]) -> dict:
    url = _http_url(args)
    payload = args.get("json")
    return _read_response(ctx, lambda client: client.stream("POST", url, json=payload))


def sleep(ctx: ToolContext, args: Mapping[str, Any]) -> dict:
    seconds = min(_number_arg(args, "seconds"), SLEEP_MAX)
    started = time.monotonic()
    while (left := seconds - (time.monotonic() - started)) > 0:
        # A sleep has nothing to finish: a Stop ends it at once.
        if ctx.cancel.wait(min(left, WATCH_SECONDS)) or ctx.abandon.is_set():
            raise ToolInterrupted(f"sleep interrupted after {time.monotonic() - started:.1f} of {seconds:g} s")
    return {}


# --- todo and memory (JSON files under .console/) ---------------------------


def _load_state(ctx: ToolContext, rel: str, default: dict) -> tuple[str, str, dict]:
    root, real = resolve(ctx.workspace, rel)
    if not os.path.lexists(real):
        return root, real, default
    try:
        data = json.loads(_read_whole(root, real, STATE_LIMIT, rel))
    except ValueError as exc:
        raise ToolError(f"{rel} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ToolError(f"{rel} does not hold a JSON object")
    return root, real, data


def _save_state(root: str, real: str, data: dict) -> None:
    _write_bytes(root, real, json.dumps(data, indent=2, sort_keys=True).encode("utf-8"))


def todo_add(ctx: ToolContext, args: Mapping[str, Any]) -> dict:
    text = _str_arg(args, "text")
    root, real, state = _load_state(ctx, TODO_FILE, {"next_id": 1, "items": []})
    items = state.setdefault("items", [])
    todo_id = int(state.get("next_id") or len(items) + 1)
    items.append({"id": todo_id, "text": text, "done": False})
    state["next_id"] = todo_id + 1
    _save_state(root, real, state)
    return {"id": todo_id}


def todo_done(ctx: ToolContext, args: Mapping[str, Any]) -> dict:
    todo_id = args.get("id")
    if isinstance(todo_id, bool) or not isinstance(todo_id, int):
        raise ToolError("argument 'id' must be an integer")
    root, real, state = _load_state(ctx, TODO_FILE, {"next_id": 1, "items": []})
    for item in state.get("items", []):
        if isinstance(item, dict) and item.get("id") == todo_id:
            item["done"] = True
            _save_state(root, real, state)
            return {"id": todo_id}
    raise ToolError(f"no todo with id {todo_id}")


def _memory(ctx: ToolContext) -> tuple[str, str, dict]:
    return _load_state(ctx, MEMORY_FILE, {})


def memory_store(ctx: ToolContext, args: Mapping[str, Any]) -> dict:
    """Set `key` (creating or overwriting it)."""
    key = _str_arg(args, "key")
    if "value" not in args:
        raise ToolError("argument 'value' is required")
    root, real, memory = _memory(ctx)
    created = key not in memory
    memory[key] = args["value"]
    _save_state(root, real, memory)
    return {"key": key, "created": created}


def memory_update(ctx: ToolContext, args: Mapping[str, Any]) -> dict:
    """Replace the value of an existing `key`."""
    key = _str_arg(args, "key")
    if "value" not in args:
        raise ToolError("argument 'value' is required")
    root, real, memory = _memory(ctx)
    if key not in memory:
        raise ToolError(f"no memory under key {key!r}")
    memory[key] = args["value"]
    _save_state(root, real, memory)
    return {"key": key}


def memory_delete(ctx: ToolContext, args: Mapping[str, Any]) -> dict:
    """Delete `key`; deleting a missing key is not an error, so a replay is harmless."""
    key = _str_arg(args, "key")
    root, real, memory = _memory(ctx)
    deleted = key in memory
    memory.pop(key, None)
    if deleted:
        _save_state(root, real, memory)
    return {"key": key, "deleted": deleted}


# --- tools that need the console (wired later) -------------------------------


def _not_available(name: str) -> Callable[[ToolContext, Mapping[str, Any]], dict]:
    def tool(ctx: ToolContext, args: Mapping[str, Any]) -> dict:
        raise ToolError(f"{name} is not available in this worker")

    return tool


Tool = Callable[[ToolContext, Mapping[str, Any]], dict]

TOOLS: dict[str, Tool] = {
    "file_read": file_read,
    "list_files": list_files,
    "file_write": file_write,
    "file_edit": file_edit,
    "bash": bash,
    "fetch": fetch,
    "http_post": http_post,
    "sleep": sleep,
    "todo_add": todo_add,
    "todo_done": todo_done,
    "memory_store": memory_store,
    "memory_update": memory_update,
    "memory_delete": memory_delete,
    "task_create": _not_available("task_create"),  # run by the executor: it needs the runner API
    "subagent": _not_available("subagent"),  # run by the executor as nested steps
    "foreach": _not_available("foreach"),  # run by the executor: its items are nested steps
}


def changed_files(tool: str, args: Mapping[str, Any] | None) -> list[str]:
    """The workspace files a completed call of `tool` wrote, reported with the step's completion.

    The server reads each on disk itself to update the manifest (and scans the
    whole workspace after `bash`, whose effects cannot be named in advance).
    """
    if tool in ("todo_add", "todo_done"):
        return [TODO_FILE]
    if tool in ("memory_store", "memory_update", "memory_delete"):
        return [MEMORY_FILE]
    if tool in ("file_write", "file_edit") and isinstance(args, Mapping) and isinstance(args.get("path"), str):
        return [os.path.normpath(args["path"])]
    return []


def run_tool(tool: str, args: Mapping[str, Any] | None, ctx: ToolContext) -> dict:
    """Run one tool call; raises ToolError (or whatever the tool raised) on failure."""
    impl = TOOLS.get(tool)
    if impl is None:
        raise ToolError(f"unknown tool {tool!r}")
    if args is None:
        args = {}
    if not isinstance(args, Mapping):
        raise ToolError("tool arguments must be an object")
    return impl(ctx, args)
