"""The reference worker's tools, fault parsing and plan agent (on the SDK); no database, no network beyond
127.0.0.1."""

from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from recovery_console import LeaseLost, Outcome, Refused
from recovery_console.reference.faults import Fault, Faults, parse_faults
from recovery_console.reference.tools import OUTPUT_LIMIT, ToolContext, ToolError, ToolInterrupted, run_tool
from recovery_console.run import heartbeat_interval
from tests.tasks.tool_client import FakeClient, claim_for, execute


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return workspace


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory next to the workspace with a secret file in it."""
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.txt").write_text("secret")
    return out


def call(ws: Path, tool: str, **args) -> dict:
    return run_tool(tool, args, ToolContext(workspace=str(ws)))


def assert_escape(ws: Path, tool: str, **args) -> None:
    with pytest.raises(ToolError, match="path escapes the workspace"):
        call(ws, tool, **args)


# --- files -------------------------------------------------------------------


def test_file_write_then_read(ws: Path) -> None:
    assert call(ws, "file_write", path="a/b/c.txt", content="héllo") == {"bytes": len("héllo".encode())}
    assert (ws / "a/b/c.txt").read_text() == "héllo"
    assert call(ws, "file_read", path="a/b/c.txt") == {"content": "héllo"}


def test_file_write_overwrites(ws: Path) -> None:
    (ws / "f.txt").write_text("a long old content")
    call(ws, "file_write", path="f.txt", content="new")
    assert (ws / "f.txt").read_text() == "new"


def test_file_read_missing_is_error(ws: Path) -> None:
    with pytest.raises(ToolError, match="No such file"):
        call(ws, "file_read", path="nope.txt")


def test_file_read_directory_is_error(ws: Path) -> None:
    (ws / "d").mkdir()
    with pytest.raises(ToolError, match="not a regular file"):
        call(ws, "file_read", path="d")


def _within(seconds: float, fn):
    """Run `fn` in a daemon thread; what it returned or raised, or AssertionError if it is still blocked."""
    box: dict = {}

    def target():
        try:
            box["result"] = fn()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still blocked after {seconds} s"
    return box


def _unblock(fifo: Path) -> None:
    """Open both ends of a FIFO once, so a thread an older worker left blocked in open() returns."""
    for flags in (os.O_RDONLY | os.O_NONBLOCK, os.O_WRONLY | os.O_NONBLOCK):
        try:
            os.close(os.open(fifo, flags))
        except OSError:
            pass


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("file_write", {"content": "x"}),
        ("file_read", {}),
        ("file_edit", {"old": "a", "new": "b"}),
        ("todo_add", {"text": "x"}),
    ],
)
def test_a_fifo_is_refused_at_once_never_waited_on(ws: Path, tool: str, args: dict) -> None:
    path = ".console/todo.json" if tool == "todo_add" else "fifo"
    (ws / path).parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(ws / path)
    try:
        box = _within(3, lambda: call(ws, tool, path=path, **args) if tool != "todo_add" else call(ws, tool, **args))
    finally:
        _unblock(ws / path)
    assert isinstance(box.get("error"), ToolError), box
    assert "not a regular file" in str(box["error"])


def test_a_fifo_with_a_reader_is_still_refused_and_gets_nothing(ws: Path) -> None:
    os.mkfifo(ws / "fifo")
    reader = os.open(ws / "fifo", os.O_RDONLY | os.O_NONBLOCK)
    try:
        box = _within(3, lambda: call(ws, "file_write", path="fifo", content="data"))
        assert "not a regular file (a FIFO)" in str(box.get("error")), box
        assert os.read(reader, 10) == b""
    finally:
        os.close(reader)


def test_file_read_keeps_one_mib_and_says_how_large_the_file_is(ws: Path) -> None:
    (ws / "big.txt").write_bytes(b"z" * (3 * OUTPUT_LIMIT))
    result = call(ws, "file_read", path="big.txt")
    assert len(result["content"]) == OUTPUT_LIMIT and result["truncated"] is True
    assert result["size"] == 3 * OUTPUT_LIMIT
    assert result["note"] == f"{OUTPUT_LIMIT} of {3 * OUTPUT_LIMIT} bytes read; the rest of the file was not read"
    assert call(ws, "file_write", path="small.txt", content="ok") and call(ws, "file_read", path="small.txt") == {
        "content": "ok"
    }


def test_file_edit_refuses_a_file_larger_than_it_reads(ws: Path) -> None:
    from recovery_console.reference.tools import EDIT_LIMIT

    (ws / "huge.txt").write_bytes(b"a" * (EDIT_LIMIT + 1))
    with pytest.raises(ToolError, match="file_edit reads files up to"):
        call(ws, "file_edit", path="huge.txt", old="a", new="b")


def test_list_files_keeps_its_limit_and_counts_the_rest(ws: Path) -> None:
    from recovery_console.reference.tools import LIST_LIMIT

    for i in range(LIST_LIMIT + 5):
        (ws / f"f{i:06d}.txt").touch()
    result = call(ws, "list_files")
    assert len(result["files"]) == LIST_LIMIT and result["files"][0] == "f000000.txt"
    assert result["count"] == LIST_LIMIT + 5 and result["truncated"] is True


def test_file_edit_replaces_every_occurrence(ws: Path) -> None:
    (ws / "f.txt").write_text("one two one")
    assert call(ws, "file_edit", path="f.txt", old="one", new="1") == {"replaced": 2}
    assert (ws / "f.txt").read_text() == "1 two 1"


def test_file_edit_missing_text_is_error_and_changes_nothing(ws: Path) -> None:
    (ws / "f.txt").write_text("abc")
    with pytest.raises(ToolError, match="not found"):
        call(ws, "file_edit", path="f.txt", old="zzz", new="y")
    assert (ws / "f.txt").read_text() == "abc"


def test_list_files_sorted_relative(ws: Path) -> None:
    (ws / "b.txt").write_text("")
    (ws / "a").mkdir()
    (ws / "a" / "z.txt").write_text("")
    (ws / "a" / "y.txt").write_text("")
    assert call(ws, "list_files") == {"files": ["a/y.txt", "a/z.txt", "b.txt"]}
    assert call(ws, "list_files", path="a") == {"files": ["a/y.txt", "a/z.txt"]}


def test_list_files_skips_links_to_the_outside(ws: Path, outside: Path) -> None:
    (ws / "in.txt").write_text("x")
    (ws / "leak.txt").symlink_to(outside / "secret.txt")
    (ws / "leakdir").symlink_to(outside, target_is_directory=True)
    (ws / "alias.txt").symlink_to(ws / "in.txt")
    assert call(ws, "list_files") == {"files": ["alias.txt", "in.txt"]}


def test_missing_or_wrong_arguments(ws: Path) -> None:
    with pytest.raises(ToolError, match="'path'"):
        call(ws, "file_read")
    with pytest.raises(ToolError, match="'content'"):
        call(ws, "file_write", path="x.txt", content=3)
    with pytest.raises(ToolError, match="unknown tool"):
        call(ws, "rm_rf")


# --- path escapes ----------------------------------------------------------


@pytest.mark.parametrize("path", ["../secret.txt", "../outside/secret.txt", "a/../../outside/secret.txt"])
def test_read_dotdot_escape(ws: Path, outside: Path, path: str) -> None:
    assert_escape(ws, "file_read", path=path)


def test_read_absolute_path(ws: Path) -> None:
    assert_escape(ws, "file_read", path="/etc/passwd")


def test_write_absolute_path(ws: Path, outside: Path) -> None:
    target = outside / "abs.txt"
    assert_escape(ws, "file_write", path=str(target), content="x")
    assert not target.exists()


def test_write_dotdot_escape_creates_nothing(ws: Path, tmp_path: Path) -> None:
    assert_escape(ws, "file_write", path="sub/../../x", content="x")
    assert not (tmp_path / "x").exists()
    assert not (ws / "sub").exists()


def test_symlinked_file_pointing_outside_read_and_write(ws: Path, outside: Path) -> None:
    (ws / "link.txt").symlink_to(outside / "secret.txt")
    assert_escape(ws, "file_read", path="link.txt")
    assert_escape(ws, "file_write", path="link.txt", content="pwned")
    assert_escape(ws, "file_edit", path="link.txt", old="secret", new="pwned")
    assert (outside / "secret.txt").read_text() == "secret"


def test_dangling_symlink_pointing_outside_is_not_written_through(ws: Path, outside: Path) -> None:
    (ws / "new.txt").symlink_to(outside / "created.txt")
    assert_escape(ws, "file_write", path="new.txt", content="x")
    assert not (outside / "created.txt").exists()


def test_symlinked_directory_pointing_outside(ws: Path, outside: Path) -> None:
    (ws / "dir").symlink_to(outside, target_is_directory=True)
    assert_escape(ws, "file_read", path="dir/secret.txt")
    assert_escape(ws, "file_write", path="dir/new.txt", content="x")
    assert_escape(ws, "file_write", path="dir/deeper/new.txt", content="x")
    assert_escape(ws, "list_files", path="dir")
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


def test_dotdot_through_a_symlinked_directory(ws: Path, tmp_path: Path, outside: Path) -> None:
    # Lexically `dir/../x` stays inside; physically it is outside/../x.
    (ws / "dir").symlink_to(outside, target_is_directory=True)
    assert_escape(ws, "file_write", path="dir/../x", content="x")
    assert not (tmp_path / "x").exists()


def test_symlink_inside_the_workspace_is_followed(ws: Path) -> None:
    (ws / "real").mkdir()
    (ws / "real" / "f.txt").write_text("inside")
    (ws / "alias").symlink_to(ws / "real", target_is_directory=True)
    assert call(ws, "file_read", path="alias/f.txt") == {"content": "inside"}
    call(ws, "file_write", path="alias/g.txt", content="new")
    assert (ws / "real" / "g.txt").read_text() == "new"


def test_state_dir_symlinked_outside_is_refused(ws: Path, outside: Path) -> None:
    (ws / ".console").symlink_to(outside, target_is_directory=True)
    assert_escape(ws, "todo_add", text="x")
    assert_escape(ws, "memory_store", key="k", value=1)
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


def test_workspace_itself_is_not_a_file(ws: Path) -> None:
    with pytest.raises(ToolError):
        call(ws, "file_write", path=".", content="x")
    with pytest.raises(ToolError):
        call(ws, "file_write", path="a/..", content="x")


# --- bash --------------------------------------------------------------------


def test_bash_runs_in_the_workspace(ws: Path) -> None:
    result = call(ws, "bash", command="pwd; echo oops >&2; exit 3")
    assert result == {"exit_code": 3, "stdout": os.path.realpath(ws) + "\n", "stderr": "oops\n"}


def test_bash_timeout_is_an_error(ws: Path) -> None:
    started = time.monotonic()
    with pytest.raises(ToolError, match="timed out"):
        call(ws, "bash", command="sleep 30 & sleep 30", timeout=0.5)
    assert time.monotonic() - started < 10


def test_bash_does_not_see_the_worker_token(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONSOLE_WORKER_TOKEN", "sekrit")
    assert call(ws, "bash", command='echo "[$CONSOLE_WORKER_TOKEN]"')["stdout"] == "[]\n"


def test_bash_keeps_one_mib_of_each_output_and_counts_the_rest(ws: Path) -> None:
    """Output is read as it comes: 6 MiB of stdout keep 1 MiB in memory, the rest is counted and said."""
    total = 6 * 1024 * 1024
    result = call(ws, "bash", command=f"yes | head -c {total}; printf err >&2")
    assert result["exit_code"] == 0 and result["truncated"] is True
    assert len(result["stdout"]) == OUTPUT_LIMIT and result["stdout"].startswith("y\ny\n")
    assert (result["stdout_bytes"], result["stderr_bytes"]) == (total, 3) and result["stderr"] == "err"
    assert result["note"] == f"stdout: {OUTPUT_LIMIT} of {total} bytes kept, the rest counted and discarded"


def test_a_cut_through_a_character_keeps_the_output_text(ws: Path) -> None:
    # 'é' is two bytes: the limit falls in the middle of one, and the kept part ends before it.
    result = call(ws, "bash", command=f"printf 'a%.0s' $(seq 1 {OUTPUT_LIMIT - 1}); yes é | head -c 100")
    assert isinstance(result["stdout"], str) and len(result["stdout"].encode()) == OUTPUT_LIMIT - 1


def test_after_a_stop_bash_is_cut_short_once_its_grace_is_over(ws: Path) -> None:
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    started = time.monotonic()
    with pytest.raises(ToolInterrupted, match="asked to stop"):
        run_tool("bash", {"command": "sleep 5"}, ToolContext(workspace=str(ws), cancel=cancel, stop_grace=0.5))
    assert time.monotonic() - started < 3


# --- fetch / http_post -------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"x" * (OUTPUT_LIMIT + 10) if self.path == "/big" else b"hello"
        self.send_response(404 if self.path == "/missing" else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        data = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        body = json.dumps({"got": data}).encode()
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_fetch(ws: Path, server: str) -> None:
    assert call(ws, "fetch", url=f"{server}/hi") == {"status": 200, "body": "hello"}
    assert call(ws, "fetch", url=f"{server}/missing")["status"] == 404


def test_fetch_truncates_to_one_mib(ws: Path, server: str) -> None:
    result = call(ws, "fetch", url=f"{server}/big")
    assert len(result["body"]) == OUTPUT_LIMIT
    assert result["truncated"] is True


def test_http_post(ws: Path, server: str) -> None:
    result = call(ws, "http_post", url=f"{server}/hook", json={"a": 1})
    assert result["status"] == 201
    assert json.loads(result["body"]) == {"got": {"a": 1}}


class _Drip(BaseHTTPRequestHandler):
    """Answers with a byte every 0.2 s for 8 s: each read is quick, the whole never is."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "40")
        self.end_headers()
        try:
            for _ in range(40):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.2)
        except OSError:
            pass

    def log_message(self, *args) -> None:
        pass


def test_a_stop_cuts_a_slow_fetch_short(ws: Path) -> None:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Drip)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        cancel = threading.Event()
        threading.Timer(0.3, cancel.set).start()
        started = time.monotonic()
        with pytest.raises(ToolInterrupted, match="asked to stop"):
            run_tool(
                "fetch",
                {"url": f"http://127.0.0.1:{httpd.server_address[1]}/"},
                ToolContext(workspace=str(ws), cancel=cancel, stop_grace=0.5),
            )
        assert time.monotonic() - started < 3
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_fetch_unreachable_and_bad_scheme(ws: Path) -> None:
    with pytest.raises(ToolError, match="request failed"):
        call(ws, "fetch", url="http://127.0.0.1:9/")
    with pytest.raises(ToolError, match="http"):
        call(ws, "fetch", url="file:///etc/passwd")


# --- sleep, todo, memory, unavailable tools ----------------------------------


def test_sleep(ws: Path) -> None:
    assert call(ws, "sleep", seconds=0.01) == {}
    with pytest.raises(ToolError):
        call(ws, "sleep", seconds=-1)


def test_sleep_is_cut_short_by_cancel(ws: Path) -> None:
    cancel = threading.Event()
    threading.Timer(0.05, cancel.set).start()
    with pytest.raises(ToolError, match="interrupted"):
        run_tool("sleep", {"seconds": 30}, ToolContext(workspace=str(ws), cancel=cancel))


def test_todo(ws: Path) -> None:
    assert call(ws, "todo_add", text="first") == {"id": 1}
    assert call(ws, "todo_add", text="second") == {"id": 2}
    assert call(ws, "todo_done", id=1) == {"id": 1}
    saved = json.loads((ws / ".console/todo.json").read_text())
    assert [(i["id"], i["done"]) for i in saved["items"]] == [(1, True), (2, False)]
    with pytest.raises(ToolError, match="no todo"):
        call(ws, "todo_done", id=9)


def test_memory(ws: Path) -> None:
    assert call(ws, "memory_store", key="k", value={"a": 1})["key"] == "k"
    assert call(ws, "memory_update", key="k", value=2) == {"key": "k"}
    assert json.loads((ws / ".console/memory.json").read_text()) == {"k": 2}
    assert call(ws, "memory_delete", key="k") == {"key": "k", "deleted": True}
    assert call(ws, "memory_delete", key="k") == {"key": "k", "deleted": False}
    with pytest.raises(ToolError, match="no memory"):
        call(ws, "memory_update", key="k", value=3)


@pytest.mark.parametrize("tool", ["task_create", "subagent"])
def test_console_tools_not_available_yet(ws: Path, tool: str) -> None:
    with pytest.raises(ToolError, match="not available"):
        call(ws, tool)


# --- faults ------------------------------------------------------------------


def test_parse_faults() -> None:
    assert parse_faults(None) == ()
    assert parse_faults("") == ()
    assert parse_faults("crash_after_dispatch:3") == (Fault("crash_after_dispatch", 3),)
    assert parse_faults(" crash_before_complete:2@1 , hang_after_dispatch:5,crash_after_plan:1") == (
        Fault("crash_before_complete", 2, 1),
        Fault("hang_after_dispatch", 5),
        Fault("crash_after_plan", 1),
    )


@pytest.mark.parametrize(
    "spec",
    ["explode:1", "crash_after_dispatch", "crash_after_dispatch:x", "crash_after_dispatch:0", "crash_after_plan:2@"],
)
def test_parse_faults_rejects_bad_items(spec: str) -> None:
    with pytest.raises(ValueError, match="WORKER_FAULT"):
        parse_faults(spec)


def test_faults_check_exits_only_at_its_point_and_attempt() -> None:
    exits: list[int] = []
    faults = Faults(parse_faults("crash_after_dispatch:3@1"), exit=exits.append)
    faults.check("after_plan", 3, 1)
    faults.check("after_dispatch", 2, 1)
    faults.check("after_dispatch", 3, 2)  # a continuation does not crash again
    assert exits == []
    faults.check("after_dispatch", 3, 1)
    assert exits == [137]


def test_hang_fault_stops_the_heartbeat_then_sleeps() -> None:
    calls: list[str] = []
    faults = Faults(parse_faults("hang_after_dispatch:1"), sleep_forever=lambda: calls.append("sleep"))
    faults.check("after_dispatch", 1, 1, on_hang=lambda: calls.append("halt"))
    assert calls == ["halt", "sleep"]


def test_faults_from_env() -> None:
    assert Faults.from_env({"WORKER_FAULT": "crash_before_complete:4"}).faults == (Fault("crash_before_complete", 4),)
    assert not Faults.from_env({})


# --- the step loop, against a fake runner API --------------------------------


def test_loop_runs_every_step_then_succeeds(ws: Path) -> None:
    client = FakeClient()
    steps = [
        {"tool": "file_write", "args": {"path": "a.txt", "content": "hi"}},
        {"tool": "file_read", "args": {"path": "a.txt"}},
    ]
    assert execute(client, claim_for(ws, steps)) is Outcome.SUCCEEDED
    assert client.written() == [
        ("plan", 1, "file_write"),
        ("dispatch", 1),
        ("complete", 1, True, {"bytes": 2}, None, 1, False),
        ("plan", 2, "file_read"),
        ("dispatch", 2),
        ("complete", 2, True, {"content": "hi"}, None, 1, False),
        ("finish", "succeeded", None),
    ]


def test_loop_skips_reused_steps(ws: Path) -> None:
    client = FakeClient()
    steps = [{"tool": "file_write", "args": {"path": "a.txt", "content": "hi"}}, {"tool": "list_files", "args": {}}]
    claim = claim_for(ws, steps, reused=[{"seq": 1, "result": {"bytes": 2}}])
    assert execute(client, claim) is Outcome.SUCCEEDED
    assert [c[:2] for c in client.written()] == [("plan", 2), ("dispatch", 2), ("complete", 2), ("finish", "succeeded")]
    assert not (ws / "a.txt").exists()


def test_loop_without_workspace_fails_the_run() -> None:
    client = FakeClient()
    assert execute(client, claim_for(None, [{"tool": "list_files"}])) is Outcome.FAILED
    assert client.written() == [("finish", "failed", "no_workspace")]


def test_loop_failed_step_fails_the_run(ws: Path) -> None:
    client = FakeClient()
    steps = [{"tool": "file_read", "args": {"path": "../x"}}, {"tool": "list_files"}]
    assert execute(client, claim_for(ws, steps)) is Outcome.FAILED
    complete = client.written()[2]
    assert complete[:3] == ("complete", 1, False) and "escapes" in complete[4]
    assert client.written()[-1] == ("finish", "failed", "step_failed")


def test_loop_stop_requested_in_complete_reply(ws: Path) -> None:
    client = FakeClient(stop_after=1)
    steps = [{"tool": "list_files"}, {"tool": "list_files"}]
    assert execute(client, claim_for(ws, steps)) is Outcome.STOPPED
    assert [c[:2] for c in client.written()] == [("plan", 1), ("dispatch", 1), ("complete", 1), ("finish", "stopped")]


def test_loop_dispatch_refused_for_stop(ws: Path) -> None:
    body = {"code": "not_eligible", "reason": "stop_requested", "detail": "stop"}
    refusal = Refused("not_eligible", "stop", status=409, body=body)
    client = FakeClient(refuse={("dispatch", 1): refusal})
    assert execute(client, claim_for(ws, [{"tool": "list_files"}])) is Outcome.STOPPED
    assert client.written() == [("plan", 1, "list_files"), ("finish", "stopped", None)]


def test_loop_stale_lease_abandons_silently(ws: Path) -> None:
    stale = LeaseLost(detail="old epoch")
    client = FakeClient(refuse={("dispatch", 1): stale})
    steps = [{"tool": "file_write", "args": {"path": "a.txt", "content": "x"}}]
    assert execute(client, claim_for(ws, steps)) is Outcome.ABANDONED
    assert client.written() == [("plan", 1, "file_write")]
    assert not (ws / "a.txt").exists()


def test_loop_result_too_large_is_completed_without_it(ws: Path) -> None:
    too_big = Refused("payload_too_large", "", status=413, body={"code": "payload_too_large"})
    client = FakeClient(refuse={("complete", 1): too_big})
    assert execute(client, claim_for(ws, [{"tool": "list_files"}])) is Outcome.SUCCEEDED
    assert client.written()[2] == ("complete", 1, True, None, None, 1, True)


def test_loop_crash_fault_fires_after_dispatch_before_the_tool(ws: Path) -> None:
    class Crash(BaseException):
        pass

    def crash(code: int) -> None:
        raise Crash(code)

    client = FakeClient()
    steps = [{"tool": "file_write", "args": {"path": "a.txt", "content": "x"}}]
    with pytest.raises(Crash):
        execute(client, claim_for(ws, steps), Faults(parse_faults("crash_after_dispatch:1"), exit=crash))
    assert client.written() == [("plan", 1, "file_write"), ("dispatch", 1)]
    assert not (ws / "a.txt").exists()


def test_heartbeat_interval_is_at_most_a_third_of_the_lease() -> None:
    assert heartbeat_interval(30, 180) == 30
    assert heartbeat_interval(30, 60) == 20
