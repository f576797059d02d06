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
"""

from __future__ import annotations

import errno
import json
import math
import os
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
OUTPUT_LIMIT = 1024 * 1024  # bytes kept of a command's stdout/stderr and of an HTTP body
HTTP_TIMEOUT = 30.0
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
    # Set when the run must stop; long waits (`sleep`) end early when it is.
    cancel: threading.Event = field(default_factory=threading.Event)
    # Set when the worker is shutting down and its drain time is up: every long
    # tool (`sleep`, `bash`) gives up at once, and its step records no outcome.
    abandon: threading.Event = field(default_factory=threading.Event)


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
    parts = _parts(root, real)
    if not parts:
        raise ToolError("path is the workspace itself, not a file")
    try:
        dir_fd = _open_dir_chain(root, parts[:-1], create=create_dirs)
        try:
            return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            # The resolved path had no symlink, so one appeared after the check.
            raise ToolError(f"path escapes the workspace: {os.path.relpath(real, root)!r}") from exc
        raise ToolError(f"{os.path.relpath(real, root)}: {exc.strerror}") from exc


def _read_bytes(root: str, real: str) -> bytes:
    # O_NONBLOCK: opening a FIFO must not hang; it is refused just below.
    fd = _open_file(root, real, os.O_RDONLY | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ToolError(f"{os.path.relpath(real, root)}: not a regular file")
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def _write_bytes(root: str, real: str, data: bytes) -> int:
    fd = _open_file(root, real, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, create_dirs=True)
    with os.fdopen(fd, "wb") as fh:
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
    root, real = resolve(ctx.workspace, _str_arg(args, "path"))
    return {"content": text_or_bytes(_read_bytes(root, real))}


def list_files(ctx: ToolContext, args: Mapping[str, Any]) -> dict:
    """Files under `path` (default: the whole workspace), as sorted workspace-relative paths.

    Symlinked directories are never descended into; a symlinked file is listed
    only when it resolves inside the workspace.
    """
    root, real = resolve(ctx.workspace, _str_arg(args, "path", required=False) or ".", allow_root=True)
    if not os.path.isdir(real):
        raise ToolError(f"{os.path.relpath(real, root)}: not a directory")
    files: list[str] = []
    # followlinks=False: a symlinked directory shows up in `dirnames` but is not entered.
    for dirpath, _dirnames, filenames in os.walk(real, followlinks=False):
        for name in filenames:
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                target = os.path.realpath(full)
                if not (_is_within(root, target) and os.path.isfile(target)):
                    continue
            files.append(os.path.relpath(full, root))
    return {"files": sorted(files)}


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
        text = _read_bytes(root, real).decode("utf-8")
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


def _truncate(data: bytes) -> tuple[str | bytes, bool]:
    truncated = len(data) > OUTPUT_LIMIT
    return text_or_bytes(data[:OUTPUT_LIMIT]), truncated


def _bash_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in _SCRUBBED_ENV}


def bash(ctx: ToolContext, args: Mapping[str, Any]) -> dict:
    """Run `command` with bash in the workspace. A non-zero exit is a result; a timeout is an error."""
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
    try:
        while True:
            # communicate() may be retried after a timeout without losing output.
            left = timeout - (time.monotonic() - started)
            try:
                out, err = proc.communicate(timeout=max(0.0, min(left, WATCH_SECONDS)))
                break
            except subprocess.TimeoutExpired:
                if ctx.abandon.is_set():
                    raise ToolInterrupted(
                        f"bash command abandoned after {time.monotonic() - started:.1f} s: the worker is shutting down"
                    ) from None
                if time.monotonic() - started >= timeout:
                    raise ToolError(f"bash command timed out after {timeout:g} s") from None
    except BaseException:
        _kill_group(proc)
        proc.communicate()
        raise
    stdout, out_cut = _truncate(out)
    stderr, err_cut = _truncate(err)
    result: dict[str, Any] = {"exit_code": proc.returncode, "stdout": stdout, "stderr": stderr}
    if out_cut or err_cut:
        result["truncated"] = True
    return result


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


def _read_response(request: Callable[[httpx.Client], Any]) -> dict:
    """Send a request and keep at most OUTPUT_LIMIT bytes of the body."""
    try:
        with httpx.Client(timeout=HTTP_TIMEOUT, follow_redirects=True) as client:
            with request(client) as response:
                body = bytearray()
                for chunk in response.iter_bytes():
                    body.extend(chunk)
                    if len(body) > OUTPUT_LIMIT:
                        break
                encoding = response.encoding or "utf-8"
                status = response.status_code
    except httpx.HTTPError as exc:
        raise ToolError(f"request failed: {type(exc).__name__}: {exc}") from exc
    truncated = len(body) > OUTPUT_LIMIT
    result: dict[str, Any] = {"status": status, "body": text_or_bytes(bytes(body[:OUTPUT_LIMIT]), encoding)}
    if truncated:
        result["truncated"] = True
    return result


def fetch(ctx: ToolContext, args: Mapping[str, Any]) -> dict:
    url = _http_url(args)
    return _read_response(lambda client: client.stream("GET", url))


def http_post(ctx: ToolContext, args: Mapping[str, Any]) -> dict:
    url = _http_url(args)
    payload = args.get("json")
    return _read_response(lambda client: client.stream("POST", url, json=payload))


def sleep(ctx: ToolContext, args: Mapping[str, Any]) -> dict:
    seconds = min(_number_arg(args, "seconds"), SLEEP_MAX)
    started = time.monotonic()
    while (left := seconds - (time.monotonic() - started)) > 0:
        if ctx.cancel.wait(min(left, WATCH_SECONDS)) or ctx.abandon.is_set():
            raise ToolInterrupted(f"sleep interrupted after {time.monotonic() - started:.1f} of {seconds:g} s")
    return {}


# --- todo and memory (JSON files under .console/) ---------------------------


def _load_state(ctx: ToolContext, rel: str, default: dict) -> tuple[str, str, dict]:
    root, real = resolve(ctx.workspace, rel)
    if not os.path.lexists(real):
        return root, real, default
    try:
        data = json.loads(_read_bytes(root, real))
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
