"""A worker that holds its workspaces (recovery_console.workspace): real files in tmp_path, the console faked.

What the worker reads (a bounded walk, never through a link), what it reports with a step's completion and
before a continuation, and what the repair jobs do on its disk (copies and a fresh directory, never a file
deleted or written over). The wire to the console is checked against an httpx mock transport.
"""

import hashlib
import json
import os
import socket
import stat

import httpx
import pytest

from recovery_console import Console, payloads
from recovery_console import workspace as w
from recovery_console.reference.agent import PlanAgent
from recovery_console.serve import Outcome, execute, serve

ODD = os.fsdecode(b"caf\xe9.txt")  # a name that is not UTF-8, as Python spells it


@pytest.fixture
def holder(tmp_path):
    return w.Holder(str(tmp_path / "root"), "box-1")


@pytest.fixture
def ws(holder):
    return holder.path_for({"workspace_key": "acme/task-7"})


def put(ws, path, text="", *, mtime_ns=None):
    full = os.path.join(ws, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w", encoding="utf-8") as fh:
        fh.write(text)
    if mtime_ns is not None:
        os.utime(full, ns=(mtime_ns, mtime_ns))
    return full


def read(path):
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


def recorded(ws):
    """The manifest the console would keep: every entry of a `bash` step's report."""
    return w.step_report(ws, "acme", "bash", {"command": "true"}, None, True, label="box-1")["entries"]


def by_path(items):
    return {json.dumps(i["path"]): i for i in items}


def key(path):
    return json.dumps(payloads.encode(path))


# --- where the workspaces are ---------------------------------------------------------------------------


def test_the_holder_comes_from_the_environment(monkeypatch, tmp_path):
    assert w.Holder.from_env({}) is None
    assert w.Holder.from_env({"CONSOLE_WORKER_WORKSPACES": " "}) is None
    named = w.Holder.from_env({"CONSOLE_WORKER_WORKSPACES": str(tmp_path), "CONSOLE_WORKER_WORKSPACES_LABEL": "b"})
    assert named == w.Holder(str(tmp_path), "b") and named.advert() == {"label": "b", "root": str(tmp_path)}
    assert w.Holder.from_env({"CONSOLE_WORKER_WORKSPACES": str(tmp_path)}).label == socket.gethostname()


def test_path_for_makes_the_workspace_private_and_refuses_a_key_that_leaves_the_root(holder, tmp_path):
    path = holder.path_for({"workspace_key": "acme/task-7"})
    assert path == os.path.join(holder.root, "acme", "task-7") and os.path.isdir(path)
    for made in (path, os.path.dirname(path)):
        assert stat.S_IMODE(os.stat(made).st_mode) == 0o700
    for bad in ("../x", "acme/../../x", "/etc", "acme//x", "acme/./x", "", None):
        with pytest.raises(ValueError):
            holder.path_for({"workspace_key": bad})
    assert sorted(os.listdir(tmp_path)) == ["root"] and not os.path.exists(os.path.join(holder.root, "x"))


# --- entries and the walk -------------------------------------------------------------------------------


def test_the_walk_lists_in_path_order_never_follows_a_link_and_lists_a_directory_only_when_empty(ws, tmp_path):
    put(ws, "b.txt", "bee\n")
    put(ws, "d/e/f.txt", "deep")
    os.mkdir(os.path.join(ws, "empty"))
    put(str(tmp_path), "outside/secret.txt", "not the workspace's")
    os.symlink(str(tmp_path / "outside"), os.path.join(ws, "link"))
    put(ws, ODD, "odd")
    entries = recorded(ws)
    assert [e["path"] for e in entries] == ["b.txt", {"$text": "caf\\udce9.txt"}, "d/e/f.txt", "empty", "link"]
    assert payloads.encode(ODD) == {"$text": "caf\\udce9.txt"}
    found = by_path(entries)
    link = found[key("link")]
    assert link["kind"] == "link" and link["link"] == str(tmp_path / "outside") and link["sha256"] is None
    assert found[key("empty")]["kind"] == "dir"
    odd = found[key(ODD)]
    assert odd["kind"] == "file" and odd["sha256"] == sha("odd") and odd["kept"] and odd["not_kept"] == ""
    assert odd["size"] == 3 and odd["ino"] == os.lstat(os.path.join(ws, ODD)).st_ino
    # Kept in the worker's content store, beside the workspaces: <root>/.store/<org>/<sha[:2]>/<sha>.
    store = os.path.join(os.path.dirname(os.path.dirname(ws)), ".store", "acme", sha("odd")[:2], sha("odd"))
    assert read(store) == "odd"


def test_a_walk_cut_short_says_so(ws, monkeypatch):
    for name in "abcde":
        put(ws, f"{name}.txt", name)
    monkeypatch.setattr(w, "MAX_ENTRIES", 3)
    report = w.step_report(ws, "acme", "bash", {"command": "true"}, None, True, label="box-1")
    assert [e["path"] for e in report["entries"]] == ["a.txt", "b.txt", "c.txt"] and report["complete"] is False
    walked = w.walk(ws)
    assert walked.covers("b.txt") and not walked.covers("d.txt")


def test_a_directory_the_walk_cannot_read_hides_nothing_as_gone(ws, monkeypatch):
    put(ws, "locked/a.txt", "a")
    put(ws, "z.txt", "z")
    manifest = recorded(ws)
    readable = w._listed
    monkeypatch.setattr(w, "_listed", lambda dfd, name: None if name == b"locked" else readable(dfd, name))
    report = w.validate(ws, "acme", manifest, label="b")
    assert report["complete"] is False and report["files"] == []
    assert w.step_report(ws, "acme", "bash", {"command": "true"}, None, True, label="b")["complete"] is False


def test_a_large_file_is_hashed_but_not_kept_and_a_huge_one_is_not_read(ws, monkeypatch):
    put(ws, "big.bin", "x" * 100)
    monkeypatch.setattr(w, "KEEP_MAX", 10)
    [big] = recorded(ws)
    assert big["sha256"] == sha("x" * 100) and big["kept"] is False and big["not_kept"] == "large"
    monkeypatch.setattr(w, "HASH_MAX", 50)
    [huge] = recorded(ws)
    assert huge["sha256"] is None and huge["not_kept"] == "hash_too_large" and huge["size"] == 100


# --- step completions -----------------------------------------------------------------------------------


def test_a_file_write_reports_its_path_and_the_named_files_gone(ws):
    put(ws, "notes.md", "hello\n")
    report = w.step_report(ws, "acme", "file_write", {"path": "./notes.md"}, ["gone.txt", "../x"], True, label="b")
    assert report["root"] == ws and report["label"] == "b" and report["scan_all"] is False and report["complete"]
    assert [e["path"] for e in report["entries"]] == ["notes.md"] and report["gone"] == ["gone.txt"]
    assert report["entries"][0]["sha256"] == sha("hello\n")
    # A failed write names no path of its own; a step that names no file reports nothing.
    assert w.step_report(ws, "acme", "file_write", {"path": "notes.md"}, None, False, label="b") is None
    assert w.step_report(ws, "acme", "fetch", {"url": "http://x"}, None, True, label="b") is None


def test_bash_reports_the_whole_walk_even_when_it_failed_and_nothing_as_gone(ws):
    put(ws, "a.txt", "a")
    report = w.step_report(ws, "acme", "bash", {"command": "exit 1"}, ["missing.txt"], False, label="b")
    assert report["scan_all"] is True and report["complete"] is True and report["gone"] == []
    assert [e["path"] for e in report["entries"]] == ["a.txt"]


# --- validation -----------------------------------------------------------------------------------------


def test_validation_lists_what_changed_was_added_or_is_missing_with_a_diff_from_the_store(ws):
    put(ws, "changed.txt", "one\ntwo\n")
    put(ws, "gone.txt", "bye\n")
    put(ws, "same.txt", "same\n")
    put(ws, "blob.bin", "a\x00b")
    put(ws, "restored.txt", "abc\n")
    manifest = recorded(ws)
    # The same size and mtime but other content: its ctime moved, so it is read and compared.
    put(ws, "restored.txt", "xyz\n", mtime_ns=by_path(manifest)[key("restored.txt")]["mtime_ns"])
    put(ws, "changed.txt", "one\nthree\n")
    os.remove(os.path.join(ws, "gone.txt"))
    put(ws, "added.txt", "new\n")
    put(ws, "blob.bin", "a\x00c")
    moved = os.stat(os.path.join(ws, "same.txt")).st_mtime_ns + 5_000_000_000
    os.utime(os.path.join(ws, "same.txt"), ns=(moved, moved))  # moved times, the same content: the same file
    report = w.validate(ws, "acme", manifest, label="box-1")
    assert report["root"] == ws and report["label"] == "box-1" and report["complete"] is True
    assert report["checked"] == 6 and "more" not in report
    files = by_path(report["files"])
    assert sorted(files) == [key(p) for p in ("added.txt", "blob.bin", "changed.txt", "gone.txt", "restored.txt")]
    assert files[key("restored.txt")]["diff"].endswith("-abc\n+xyz\n")
    changed = files[key("changed.txt")]
    assert changed["status"] == "changed" and changed["recorded"]["sha256"] == sha("one\ntwo\n")
    assert changed["actual"]["sha256"] == sha("one\nthree\n")
    assert changed["diff"] == (
        "--- recorded/changed.txt\n+++ workspace/changed.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+three\n"
    )
    added = files[key("added.txt")]
    assert added["status"] == "added" and added["recorded"] is None and added["actual"]["sha256"] == sha("new\n")
    assert added["diff"].startswith("--- /dev/null\n+++ workspace/added.txt\n")
    missing = files[key("gone.txt")]
    assert missing["status"] == "missing" and missing["actual"] is None
    assert missing["diff"].startswith("--- recorded/gone.txt\n+++ /dev/null\n") and "-bye" in missing["diff"]
    assert files[key("blob.bin")]["diff"] is None and files[key("blob.bin")]["diff_note"] == "binary_or_large"


def test_a_change_whose_recorded_content_was_not_kept_has_no_diff(ws):
    put(ws, "a.txt", "one\n")
    manifest = recorded(ws)
    os.remove(os.path.join(os.path.dirname(os.path.dirname(ws)), ".store", "acme", sha("one\n")[:2], sha("one\n")))
    put(ws, "a.txt", "two\n")
    [item] = w.validate(ws, "acme", manifest, label="b")["files"]
    assert item["status"] == "changed" and item["diff"] is None and item["diff_note"] == "not_kept"


def test_an_empty_directory_or_a_link_only_on_one_side_is_a_difference(ws, tmp_path):
    os.mkdir(os.path.join(ws, "was-empty"))
    manifest = recorded(ws)
    os.rmdir(os.path.join(ws, "was-empty"))
    os.mkdir(os.path.join(ws, "now-empty"))
    os.symlink("/etc", os.path.join(ws, "ln"))
    files = by_path(w.validate(ws, "acme", manifest, label="b")["files"])
    assert files[key("was-empty")]["status"] == "missing" and files[key("now-empty")]["status"] == "added"
    assert files[key("ln")]["status"] == "added" and files[key("ln")]["diff_note"] == "link"


# --- repair jobs ----------------------------------------------------------------------------------------


def job(kind, manifest, plan=(), hint="20261206-2101"):
    return {
        "repair": 9,
        "kind": kind,
        "task": 7,
        "org": "acme",
        "workspace_key": "acme/task-7",
        "hint": hint,
        "manifest": manifest,
        "plan": list(plan),
    }


def test_reconcile_adopts_what_only_a_person_changed_and_holds_a_copy_of_what_the_plan_changes(ws):
    put(ws, "plan.txt", "v1\n")
    put(ws, "person.txt", "v1\n")
    put(ws, "older.txt", "v1\n")
    manifest = recorded(ws)
    recorded_mtime = by_path(manifest)[key("older.txt")]["mtime_ns"]
    put(ws, "plan.txt", "by hand\n")
    put(ws, "person.txt", "by hand\n")
    put(ws, "older.txt", "an old copy\n", mtime_ns=recorded_mtime - 10_000_000_000)
    put(ws, "added.txt", "new\n")
    plan = [{"seq": 3, "tool": "file_write", "paths": ["plan.txt"], "all": False}]
    done = w.reconcile(ws, "acme", job("reconcile", manifest, plan))
    assert done["ok"] is True
    result = done["result"]
    assert result["root"] == ws and result["checked"] == 4
    adopted = by_path(result["adopted"])
    assert sorted(adopted) == [key("added.txt"), key("person.txt")]
    after = adopted[key("person.txt")]["after"]
    assert after["sha256"] == sha("by hand\n") and after["kept"] is True
    assert adopted[key("person.txt")]["before"]["sha256"] == sha("v1\n")
    held = by_path(result["held"])
    assert held[key("plan.txt")]["reason"] == "plan_changes" and held[key("plan.txt")]["seqs"] == [3]
    assert held[key("older.txt")]["reason"] == "older" and held[key("older.txt")]["seqs"] == []
    copies = os.path.join(f"{ws}.held", "20261206-2101")
    assert result["held_copy"] == copies
    assert held[key("plan.txt")]["copy"] == os.path.join(copies, "plan.txt")
    assert read(os.path.join(copies, "plan.txt")) == "by hand\n" and read(os.path.join(copies, "older.txt")) == (
        "an old copy\n"
    )
    # Copies, not moves: the workspace's files are as the person left them.
    assert read(os.path.join(ws, "plan.txt")) == "by hand\n" and read(os.path.join(ws, "older.txt")) == "an old copy\n"
    assert {(f["path"], f["sha256"], f["why"]) for f in result["held_files"]} == {
        ("plan.txt", sha("by hand\n"), "plan_changes"),
        ("older.txt", sha("an old copy\n"), "older"),
    }
    assert sorted(i["path"] for i in result["remaining"]) == ["older.txt", "plan.txt"]
    assert by_path(result["remaining"])[key("plan.txt")]["diff"].endswith("-v1\n+by hand\n")


def test_a_plan_step_that_may_change_everything_holds_every_difference(ws):
    put(ws, "a.txt", "v1\n")
    manifest = recorded(ws)
    put(ws, "a.txt", "v2\n")
    plan = [{"seq": 2, "tool": "bash", "paths": [], "all": True}]
    result = w.reconcile(ws, "acme", job("reconcile", manifest, plan))["result"]
    assert result["adopted"] == [] and [(h["path"], h["reason"], h["seqs"]) for h in result["held"]] == [
        ("a.txt", "plan_changes", [2])
    ]


def test_reissue_rebuilds_a_fresh_workspace_from_the_store_and_leaves_the_old_one_untouched(ws, holder, monkeypatch):
    put(ws, "a.txt", "recorded\n")
    put(ws, "d/b.txt", "bee\n")
    os.mkdir(os.path.join(ws, "empty"))
    os.symlink("a.txt", os.path.join(ws, "ln"))
    os.mkfifo(os.path.join(ws, "pipe"))
    monkeypatch.chdir(ws)  # a socket's path must be short
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind("sock")
    manifest = recorded(ws)
    put(ws, "a.txt", "changed by hand\n")
    done = w.reissue(ws, holder.root, job("reissue", manifest))
    assert done["ok"] is True
    result = done["result"]
    fresh = f"{ws}.reissue-20261206-2101"
    assert result["root"] == fresh and result["workspace_key"] == "acme/task-7.reissue-20261206-2101"
    assert result["old_root"] == ws and result["checked"] == 6
    assert read(os.path.join(fresh, "a.txt")) == "recorded\n" and read(os.path.join(fresh, "d/b.txt")) == "bee\n"
    assert os.stat(os.path.join(fresh, "a.txt")).st_mtime_ns == by_path(manifest)[key("a.txt")]["mtime_ns"]
    assert os.readlink(os.path.join(fresh, "ln")) == "a.txt" and os.listdir(os.path.join(fresh, "empty")) == []
    assert stat.S_ISFIFO(os.lstat(os.path.join(fresh, "pipe")).st_mode)
    assert result["not_remade"] == [{"path": "sock", "kind": "socket"}] and not os.path.exists(f"{fresh}/sock")
    assert sorted(r["path"] for r in result["rebuilt"]) == ["a.txt", "d/b.txt", "empty", "ln", "pipe"]
    assert {e["path"]: e["sha256"] for e in result["entries"] if e["kind"] == "file"} == {
        "a.txt": sha("recorded\n"),
        "d/b.txt": sha("bee\n"),
    }
    assert result["kept_differences"] == [
        {"path": "a.txt", "status": "changed", "sha256": sha("changed by hand\n"), "why": "changed"}
    ]
    assert read(os.path.join(ws, "a.txt")) == "changed by hand\n"  # the old directory stays as it was
    assert sorted(os.listdir(ws)) == ["a.txt", "d", "empty", "ln", "pipe", "sock"]


def test_reissue_refuses_when_recorded_content_was_not_kept(ws, holder, monkeypatch):
    put(ws, "small.txt", "kept\n")
    put(ws, "big.txt", "x" * 100)
    monkeypatch.setattr(w, "KEEP_MAX", 10)
    manifest = recorded(ws)
    done = w.reissue(ws, holder.root, job("reissue", manifest))
    assert done["ok"] is False and done["error"]["code"] == "content_not_kept"
    assert done["error"]["files"] == ["big.txt"] and "big.txt" in done["error"]["detail"]
    assert sorted(os.listdir(os.path.dirname(ws))) == ["task-7"]  # nothing was made


# --- the wire: claims, completions, the check before a continuation, repair jobs ---------------------------


class FakeConsole:
    """The runner API as a worker sees it, answering from `claims` and `repairs` and recording every request."""

    def __init__(self, claims=(), repairs=(), admitted=True, exports=()):
        self.claims, self.repairs, self.admitted = list(claims), list(repairs), admitted
        self.exports = list(exports)
        self.requests = []

    def __call__(self, request):
        body = json.loads(request.content)
        path = request.url.path
        self.requests.append((path, body))
        if path == "/api/runner/claim/":
            return self.next(self.claims)
        if path == "/api/runner/repairs/claim/":
            return self.next(self.repairs)
        if path == "/api/runner/exports/claim/":
            return self.next(self.exports)
        if path.endswith("/workspace/"):
            if self.admitted:
                return httpx.Response(200, json={"admitted": True})
            return httpx.Response(200, json={"admitted": False, "action": 5, "detail": "a.txt changed"})
        if path.endswith("/steps/"):
            return httpx.Response(201, json={"phase": "dispatched", "recovery_mode": "notify"})
        return httpx.Response(200, json={})

    @staticmethod
    def next(queue):
        return httpx.Response(200, json=queue.pop(0)) if queue else httpx.Response(204)

    def sent(self, suffix):
        return [body for path, body in self.requests if path.endswith(suffix)]

    def console(self):
        return Console("http://console.test", "t", retry_seconds=1, transport=httpx.MockTransport(self))


def claim(**extra):
    return {
        "run": 11,
        "task": 7,
        "lease_epoch": 1,
        "lease_seconds": 60,
        "heartbeat_seconds": 30,
        "kind": "agent",
        "input": {"prompt": "write"},
        "workspace": "/srv/console/workspaces/acme/task-7",  # the server's path: not this worker's
        "workspace_key": "acme/task-7",
        **extra,
    }


def test_a_holding_worker_claims_with_its_workspaces_works_in_its_own_and_reports_each_change(holder):
    fake = FakeConsole(claims=[claim()])
    seen = []

    def agent(run):
        seen.append(run.workspace)
        run.tool("file_write", {"path": "notes.md"}, lambda: put(run.workspace, "notes.md", "hi\n") and {})
        run.tool("fetch", {"url": "http://x"}, lambda: {"status": 200})
        return "done"

    with fake.console() as console:
        assert serve(console, None, agent, once=True, handle_signals=False, holder=holder) == 1
    assert seen == [os.path.join(holder.root, "acme", "task-7")]
    assert fake.sent("/claim/")[0]["workspaces"] == {"label": "box-1", "root": holder.root}
    first, second = fake.sent("/complete/")
    assert [e["path"] for e in first["workspace"]["entries"]] == ["notes.md"]
    assert first["workspace"]["root"] == seen[0] and first["workspace"]["label"] == "box-1"
    assert first["workspace"]["entries"][0]["sha256"] == sha("hi\n") and first["workspace"]["gone"] == []
    assert "workspace" not in second  # a step that changes no file reports no workspace
    assert fake.sent("/finish/")[0]["status"] == "succeeded"


def test_a_claim_without_a_workspace_key_is_served_as_before(holder):
    legacy = claim()
    del legacy["workspace_key"]
    fake = FakeConsole(claims=[legacy])
    seen = []

    def agent(run):
        seen.append(run.workspace)
        run.tool("file_write", {"path": "notes.md"}, lambda: {}, files=["notes.md"])

    with fake.console() as console:
        assert serve(console, None, agent, once=True, handle_signals=False, holder=holder) == 1
    assert seen == ["/srv/console/workspaces/acme/task-7"]
    [done] = fake.sent("/complete/")
    assert done["files"] == ["notes.md"] and "workspace" not in done


def test_a_claim_whose_workspace_key_leaves_the_root_fails_the_run_before_anything_runs(holder):
    fake = FakeConsole()
    called = []
    with fake.console() as console:
        outcome = execute(console, claim(workspace_key="acme/../../etc"), called.append, holder=holder)
    assert outcome is Outcome.FAILED and called == []
    [finish] = fake.sent("/finish/")
    assert finish["status"] == "failed" and finish["error_code"] == "no_workspace"
    assert not os.path.exists(os.path.join(os.path.dirname(holder.root), "etc"))


def test_a_continuation_not_admitted_runs_nothing_and_writes_no_end(holder, ws):
    put(ws, "a.txt", "v1\n")
    manifest = recorded(ws)
    put(ws, "a.txt", "v2\n")
    fake = FakeConsole(admitted=False)
    called = []
    with fake.console() as console:
        outcome = execute(console, claim(workspace_check={"manifest": manifest}), called.append, holder=holder)
    assert outcome is Outcome.REFUSED and called == []
    [report] = fake.sent("/runs/11/workspace/")
    assert report["epoch"] == 1 and report["root"] == ws and report["label"] == "box-1" and report["checked"] == 1
    assert [(f["path"], f["status"]) for f in report["files"]] == [("a.txt", "changed")]
    assert fake.sent("/finish/") == [] and fake.sent("/steps/") == []


def test_an_admitted_continuation_runs_after_its_check(holder, ws):
    put(ws, "a.txt", "v1\n")
    fake = FakeConsole()
    with fake.console() as console:
        outcome = execute(console, claim(workspace_check={"manifest": recorded(ws)}), lambda run: "ok", holder=holder)
    assert outcome is Outcome.SUCCEEDED
    assert fake.sent("/workspace/")[0]["files"] == [] and fake.sent("/finish/")[0]["status"] == "succeeded"


def test_an_idle_holding_worker_does_repair_jobs_and_reports_a_failure_as_a_worker_error(holder, ws):
    put(ws, "a.txt", "v1\n")
    manifest = recorded(ws)
    put(ws, "a.txt", "v2\n")
    broken = {**job("reconcile", manifest), "repair": 10, "workspace_key": "../elsewhere"}
    fake = FakeConsole(repairs=[job("reconcile", manifest), broken])
    with fake.console() as console:
        assert serve(console, None, lambda run: None, once=True, handle_signals=False, holder=holder) == 0
    asked = fake.sent("/repairs/claim/")
    assert len(asked) == 3 and asked[0] == {"worker": f"{socket.gethostname()}-{os.getpid()}-1", "label": "box-1"}
    done, failed = (body for path, body in fake.requests if path.endswith("/result/"))
    assert [p for p, _ in fake.requests if p.endswith("/result/")] == [
        "/api/runner/repairs/9/result/",
        "/api/runner/repairs/10/result/",
    ]
    assert done["ok"] is True and [a["path"] for a in done["result"]["adopted"]] == ["a.txt"]
    assert failed["ok"] is False and failed["error"]["code"] == "worker_error"
    assert "ValueError" in failed["error"]["detail"]


def test_an_idle_holding_worker_exports_and_posts_what_the_copy_did(holder, ws, tmp_path):
    put(ws, "a.txt", "v1\n")
    dest = tmp_path / "out"
    job = {"export": 4, "task": 7, "workspace_key": "acme/task-7", "destination": str(dest), "hint": "h-export"}
    fake = FakeConsole(exports=[job])
    with fake.console() as console:
        assert serve(console, None, lambda run: None, once=True, handle_signals=False, holder=holder) == 0
    [posted] = fake.sent("/exports/4/result/")
    assert posted["ok"] is True and [c["path"] for c in posted["result"]["copied"]] == ["a.txt"]
    assert read(dest / "a.txt") == "v1\n"


def test_the_reference_worker_runs_its_plan_in_the_held_workspace_and_reports_each_change(holder):
    steps = [
        {"tool": "file_write", "args": {"path": "a.txt", "content": "one\n"}},
        {"tool": "bash", "args": {"command": "echo two > b.txt"}},
    ]
    fake = FakeConsole(claims=[claim(kind="plan", input={"steps": steps})])
    with fake.console() as console:
        assert serve(console, None, PlanAgent(), once=True, handle_signals=False, holder=holder) == 1
    ws = os.path.join(holder.root, "acme", "task-7")
    assert read(os.path.join(ws, "a.txt")) == "one\n" and read(os.path.join(ws, "b.txt")) == "two\n"
    wrote, ran = (body["workspace"] for body in fake.sent("/complete/"))
    assert [(e["path"], e["sha256"]) for e in wrote["entries"]] == [("a.txt", sha("one\n"))]
    assert wrote["scan_all"] is False and ran["scan_all"] is True and ran["complete"] is True
    assert [(e["path"], e["sha256"]) for e in ran["entries"]] == [("a.txt", sha("one\n")), ("b.txt", sha("two\n"))]
    assert fake.sent("/finish/")[0]["status"] == "succeeded"


def test_an_export_copies_every_file_keeps_what_it_replaces_and_never_writes_through_a_link(ws, tmp_path):
    put(ws, "notes/a.md", "new\n")
    put(ws, "same.txt", "same\n")
    os.symlink("/etc/passwd", os.path.join(ws, "link"))
    dest = tmp_path / "out"
    put(str(dest), "notes/a.md", "old\n")
    put(str(dest), "same.txt", "same\n")
    done = w.export(ws, str(dest), "20261206-2101-export")
    assert done["ok"], done
    r = done["result"]
    assert [c["path"] for c in r["copied"]] == ["notes/a.md"] and r["copied"][0]["before"] == sha("old\n")
    assert [u["path"] for u in r["unchanged"]] == ["same.txt"]
    assert r["skipped"] == [{"path": "link", "why": "link", "link": "/etc/passwd"}]
    assert read(dest / "notes/a.md") == "new\n" and not (dest / "link").exists()
    # What the destination held is kept first, beside the workspace, on this worker's disk.
    assert read(os.path.join(r["held_copy"], "notes/a.md")) == "old\n"
    assert r["held_files"] == [{"path": "notes/a.md", "sha256": sha("old\n"), "size": 4, "why": "replaced"}]

    os.remove(dest / "same.txt")
    os.symlink(tmp_path / "elsewhere", dest / "same.txt")
    put(ws, "same.txt", "changed\n")
    stopped = w.export(ws, str(dest), "20261206-2102-export")
    assert not stopped["ok"] and "never followed or replaced" in stopped["error"]
    assert not (tmp_path / "elsewhere").exists()
