"""Workspaces hold more than regular files, and more than a walk can reach: links, empty directories, FIFOs,
sockets, names that are not text, files too large to read, more entries than a walk takes, a content store
that cannot be written. Each is recorded as what it is, compared as what it is, and never blocks recovery for
good; reading them never holds a lock or a supervisor pass."""

import json
import os
import stat
import threading
import time
from pathlib import Path

import pytest
from django.db import connection

from recovery.supervisor.loop import supervise_once
from recovery_console.reference.tools import ToolContext, run_tool
from tasks import services
from tasks.models import Run, Step, Task, WorkspaceFile
from tasks.workspace import store_root
from tests.conftest import token_client
from tests.factories import user_token
from tests.helpers import visible_text
from tests.recovery import engine as e
from tests.recovery.workdisk import crash_at, edit_by_hand, finish_all, run_steps, sha, validation_action

pytestmark = pytest.mark.django_db

W = "file_write"
# What `python -m venv` or `npm install` leaves: links (absolute and relative), directories, one of them empty;
# and what other programs leave: a FIFO, a socket, a name that is not UTF-8.
VENV = (
    "mkdir -p venv/bin venv/lib/empty && printf '#!' > venv/bin/activate"
    " && ln -s /usr/bin/python3 venv/bin/python && ln -s python venv/bin/python3"
    " && mkfifo pipe && python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('sock')\""
    " && printf x > $'caf\\xe9.txt'"
)
ODD_KEY = "/caf\\udce9.txt"  # its stored form
ODD_WIRE = {"$text": "caf\\udce9.txt"}  # its wire form (API, pages)


def rows(task) -> dict[str, WorkspaceFile]:
    return {r.path: r for r in WorkspaceFile.objects.filter(task=task)}


def repair(client, action, name):
    action.refresh_from_db()
    body = {"version": action.version, "repair": name, "run": action.run_id}
    return client.post(f"/api/actions/{action.pk}/repair/", body, format="json")


@pytest.fixture
def admin_api(admin_user):
    return token_client(user_token(admin_user))


# --- every kind of entry ------------------------------------------------------------------------


def test_every_kind_of_entry_an_agent_makes_is_recorded_as_what_it_is(org, agent, api):
    task = e.start(org, [("bash", {"command": VENV})])
    finish_all(e.first_run(task))
    m = rows(task)
    assert (m["venv/bin/python"].kind, m["venv/bin/python"].link) == ("link", "/usr/bin/python3")
    assert (m["venv/bin/python3"].kind, m["venv/bin/python3"].link) == ("link", "python")
    assert m["venv/bin/python"].sha256 == "" and not m["venv/bin/python"].kept  # never read through
    assert m["venv/lib/empty"].kind == "dir"
    assert "venv" not in m and "venv/bin" not in m  # a directory with entries is implied by them
    assert (m["pipe"].kind, m["sock"].kind) == ("fifo", "socket")
    assert (m[ODD_KEY].kind, m[ODD_KEY].sha256, m[ODD_KEY].kept) == ("file", sha("x"), True)
    assert m["venv/bin/activate"].sha256 == sha("#!")

    body = api.get(f"/api/tasks/{task.pk}/workspace/").json()
    listed = {json.dumps(f["path"], sort_keys=True): f for f in body["files"]}
    assert {f["status"] for f in body["files"]} == {"same"}
    odd = listed[json.dumps(ODD_WIRE, sort_keys=True)]
    assert odd["recorded"]["sha256"] == sha("x")
    assert listed['"venv/bin/python"']["actual"] == {
        "size": 0,
        "sha256": None,
        "mtime": listed['"venv/bin/python"']["actual"]["mtime"],
        "kind": "link",
        "link": "/usr/bin/python3",
    }


def test_a_venv_made_by_a_bash_step_never_blocks_its_recovery(org, agent):
    task = e.start(org, [("bash", {"command": VENV}), e.SAFE, ("file_read", {"path": "venv/bin/activate"})])
    source = crash_at(e.first_run(task), 2)
    report = supervise_once()
    assert report.opened == [] and len(report.continued) == 1
    continuation = Run.objects.get(pk=report.continued[0])
    assert continuation.continues_id == source.pk and continuation.status == "queued"


def test_names_that_are_not_text_are_shown_in_their_wire_form_on_the_card_and_the_panel(org, agent, client, admin_user):
    task = e.start(org, [(W, {"path": "a.txt", "content": "a"}), e.SAFE])
    crash_at(e.first_run(task), 2)
    with open(os.fsencode(Task.objects.get(pk=task.pk).workspace) + b"/caf\xe9.txt", "wb") as fh:
        fh.write(b"by hand")
    supervise_once()
    action = validation_action(task)
    f = action.evidence["files"][0]
    assert (f["path"], f["status"], f["actual"]["sha256"]) == (ODD_WIRE, "added", sha("by hand"))
    client.force_login(admin_user)
    page = visible_text(client.get(f"/tasks/{task.pk}/").content.decode())
    # The wire form, as JSON (the escape form's backslash is itself escaped), exactly as the API shows it.
    assert '{"$text": "caf\\\\udce9.txt"} not in the manifest added on disk' in page


def test_an_isolated_reissue_makes_links_empty_directories_and_fifos_again(org, agent, admin_api):
    task = e.start(org, [("bash", {"command": VENV}), (W, {"path": "notes.txt", "content": "v1"}), e.SAFE])
    source = crash_at(e.first_run(task), 3)
    edit_by_hand(task, "notes.txt", "by hand")
    supervise_once()
    action = validation_action(task)
    r = repair(admin_api, action, "reissue")
    assert r.status_code == 202, r.content
    result = r.json()["result"]
    task.refresh_from_db()
    fresh = Path(task.workspace)
    assert os.readlink(fresh / "venv/bin/python") == "/usr/bin/python3"
    assert os.readlink(fresh / "venv/bin/python3") == "python"
    assert (fresh / "venv/lib/empty").is_dir() and not any((fresh / "venv/lib/empty").iterdir())
    assert stat.S_ISFIFO((fresh / "pipe").lstat().st_mode)
    with open(os.fsencode(str(fresh)) + b"/caf\xe9.txt", "rb") as fh:
        assert fh.read() == b"x"
    assert (fresh / "notes.txt").read_text() == "v1"
    # A socket is made by the program that listens on it: it is not made again, and the result says so.
    assert not (fresh / "sock").exists() and result["not_remade"] == [{"path": "sock", "kind": "socket"}]
    assert "sock" not in rows(task)
    assert "1 socket or device not made again" in r.json()["summary"]
    # The rebuilt workspace matches its manifest: the continuation is admitted.
    report = supervise_once()
    assert Run.objects.get(pk=report.continued[0]).continues_id == source.pk


def test_a_decision_that_a_bash_step_happened_takes_its_links_and_fifos_as_its_effect(org, agent, operator):
    from recovery.actions import action_decide
    from recovery.models import RecoveryAction

    task = e.start(org, [("bash", {"command": "ln -s target link && mkfifo pipe"}), e.SAFE])
    run = e.claim(e.first_run(task))
    e.plan_step(run, 1)
    e.dispatch_step(run, 1)
    run_tool("bash", {"command": "ln -s target link && mkfifo pipe"}, ToolContext(workspace=task.workspace))
    e.lapse()  # the worker died before completing it
    supervise_once()
    action = RecoveryAction.objects.get(task=task, kind="unknown_outcome")
    action_decide(action_id=action.pk, user=operator, version=action.version, outcome="performed", note="it ran")
    action.refresh_from_db()
    assert action.status == "retrying"
    m = rows(task)
    assert (m["link"].kind, m["link"].link, m["link"].source) == ("link", "target", "decision")
    assert m["pipe"].kind == "fifo"


# --- a walk's bound ------------------------------------------------------------------------------


def test_entries_beyond_a_walks_bound_are_never_dropped_nor_called_missing(org, agent, settings, admin_user, client):
    settings.CONSOLE_WORKSPACE_MAX_ENTRIES = 6
    task = e.start(
        org,
        [("bash", {"command": "touch z1 z2 z3"}), ("bash", {"command": "touch a0 a1 a2 a3 a4 a5 a6 a7"}), e.SAFE],
    )
    run = e.claim(e.first_run(task))
    run_steps(run, 1)
    assert set(rows(task)) == {"z1", "z2", "z3"}
    run_steps(run, 2)
    # The walk reached a0..a5 (six entries in path order): those are recorded; z1..z3, beyond it, are kept.
    assert set(rows(task)) == {"a0", "a1", "a2", "a3", "a4", "a5", "z1", "z2", "z3"}
    notes = Step.objects.get(run=run, seq=2).workspace_notes
    assert notes["scan"] == {"limit": 6, "last": "a5"}
    e.plan_step(run, 3)
    e.dispatch_step(run, 3)
    e.lapse()
    report = supervise_once()  # nothing beyond the walk is missing: the continuation is admitted
    assert report.opened == [] and len(report.continued) == 1
    client.force_login(admin_user)
    page = visible_text(client.get(f"/tasks/{task.pk}/").content.decode())
    assert "The workspace holds more than 6 entries: entries after a5 (in path order) are neither recorded" in page
    card = visible_text(client.get(f"/agents/builder/runs/{run.pk}/").content.decode())
    assert "The workspace holds more than 6 entries: entries after a5 were not recorded" in card


def test_recording_twenty_thousand_files_takes_a_bounded_number_of_queries(org, agent, django_assert_max_num_queries):
    command = "mkdir d && cd d && seq -f 'f%05g' 20000 | xargs touch"
    task = e.start(org, [("bash", {"command": command})])
    run = e.claim(e.first_run(task))
    e.plan_step(run, 1)
    e.dispatch_step(run, 1)
    result = run_tool("bash", {"command": command}, ToolContext(workspace=task.workspace))
    started = time.monotonic()
    with django_assert_max_num_queries(60):
        services.step_complete(
            worker=run.lease_worker, run_id=run.pk, epoch=run.lease_epoch, seq=1, ok=True, result=result
        )
    took = time.monotonic() - started
    assert WorkspaceFile.objects.filter(task=task).count() == 20_000
    assert took < 60, f"recording 20,000 files took {took:.0f} s"


# --- files too large to read, and budgets --------------------------------------------------------


def test_a_file_over_the_hash_bound_is_never_read_and_is_compared_by_size_and_times(org, agent, settings, api):
    settings.CONSOLE_WORKSPACE_HASH_MAX_BYTES = 1024 * 1024
    task = e.start(org, [("bash", {"command": "truncate -s 256M big.img"}), e.SAFE])
    crash_at(e.first_run(task), 2)
    row = rows(task)["big.img"]
    assert (row.size, row.sha256, row.kept, row.not_kept) == (256 * 2**20, "", False, "hash_too_large")
    assert row.ctime_ns and row.ino
    report = supervise_once()  # unchanged: the same size, times and inode — no content needed
    assert len(report.continued) == 1 and report.opened == []

    big = Path(task.workspace) / "big.img"
    os.utime(big, ns=(big.stat().st_atime_ns, big.stat().st_mtime_ns + 5_000_000_000))
    f = next(f for f in api.get(f"/api/tasks/{task.pk}/workspace/").json()["files"] if f["path"] == "big.img")
    # Its times moved and its content is too large to read: a difference, and it says it was not compared.
    assert f["status"] == "changed" and f["verified"] is False
    assert f["actual"]["hashed"] is False and f["actual"]["not_kept"] == "hash_too_large"


@pytest.mark.django_db(transaction=True)
def test_a_steps_completion_reads_its_files_before_it_locks_the_run(org, agent, settings):
    """Heartbeats never wait for a file to be hashed: the content is read before the run's row is locked."""
    settings.CONSOLE_WORKSPACE_HASH_MAX_BYTES = 2 * 2**30
    command = "truncate -s 1G big.img"
    task = e.start(org, [("bash", {"command": command})])
    run = e.claim(e.first_run(task))
    e.plan_step(run, 1)
    e.dispatch_step(run, 1)
    run_tool("bash", {"command": command}, ToolContext(workspace=task.workspace))
    done: dict = {}

    def complete():
        started = time.monotonic()
        try:
            services.step_complete(
                worker=run.lease_worker, run_id=run.pk, epoch=run.lease_epoch, seq=1, ok=True, result={}
            )
        finally:
            done["took"] = time.monotonic() - started
            connection.close()

    thread = threading.Thread(target=complete)
    thread.start()
    time.sleep(0.3)
    started = time.monotonic()
    services.run_heartbeat(worker=run.lease_worker, run_id=run.pk, epoch=run.lease_epoch)
    beat = time.monotonic() - started
    thread.join()
    assert done["took"] > 1.0, "the file was read too fast for this test to show anything"
    assert beat < 0.5, f"the heartbeat waited {beat:.1f} s while the completion took {done['took']:.1f} s"
    assert rows(task)["big.img"].sha256 == sha(b"\0" * 2**30)


def test_a_supervisor_pass_reads_at_most_its_budget_and_leaves_the_rest_to_the_next(org, agent, settings):
    settings.CONSOLE_WORKSPACE_HASH_MAX_BYTES = settings.CONSOLE_WORKSPACE_HASH_BUDGET = 1024 * 1024
    content = "x" * (700 * 1024)
    tasks = []
    for title in ("first", "second"):
        task = e.start(org, [(W, {"path": "data.txt", "content": content}), e.SAFE], title=title)
        crash_at(e.first_run(task), 2)
        # A person touched it: its times moved, its content did not. Only reading it shows it is the same.
        edit_by_hand(task, "data.txt", content)
        tasks.append(task)
    first = supervise_once()
    assert len(first.continued) == 1 and first.opened == []  # 700 KiB read; the second would pass the budget
    second = supervise_once()
    assert len(second.continued) == 1 and second.opened == []
    continued = {Run.objects.get(pk=r).task_id for r in first.continued + second.continued}
    assert continued == {t.pk for t in tasks}


# --- a store that cannot be written ------------------------------------------------------------------


def test_a_step_whose_file_cannot_be_kept_is_still_recorded_and_says_which_and_why(
    org, agent, runner, client, admin_user
):
    task = e.start(org, [(W, {"path": "a.txt", "content": "hello"}), e.SAFE])
    # The organization's content store cannot be made: a file stands where its directory would be.
    store = store_root(org.slug)
    store.parent.mkdir(parents=True, exist_ok=True)
    if store.is_dir():
        os.rename(store, f"{store}.moved-{time.time_ns()}")
    store.write_text("not a directory")
    claim = runner.post("/api/runner/claim/", {"worker": "w"}, format="json").json()
    run_id, epoch = claim["run"], claim["lease_epoch"]
    runner.post(
        f"/api/runner/runs/{run_id}/steps/",
        {"epoch": epoch, "seq": 1, "tool": W, "args": {"path": "a.txt", "content": "hello"}},
        format="json",
    )
    runner.post(f"/api/runner/runs/{run_id}/steps/1/dispatch/", {"epoch": epoch}, format="json")
    Path(Task.objects.get(pk=task.pk).workspace, "a.txt").write_text("hello")  # the tool ran
    r = runner.post(
        f"/api/runner/runs/{run_id}/steps/1/complete/",
        {"epoch": epoch, "ok": True, "result": {"bytes": 5}, "files": ["a.txt"]},
        format="json",
    )
    try:
        assert r.status_code == 200, r.content
        step = Step.objects.get(run_id=run_id, seq=1)
        assert step.phase == "completed" and step.result == {"bytes": 5}
        row = rows(task)["a.txt"]
        assert (row.sha256, row.kept, row.not_kept) == (sha("hello"), False, "store_error")
        assert step.workspace_notes["not_kept"] == [
            {"path": "a.txt", "why": "store_error", "detail": "Not a directory"}
        ]
        client.force_login(admin_user)
        card = visible_text(client.get(f"/agents/builder/runs/{run_id}/").content.decode())
        assert "1 file not kept: a.txt — not kept: the content store could not write it (Not a directory)." in card
        panel = visible_text(client.get(f"/tasks/{task.pk}/").content.decode())
        assert "not kept: the content store could not write it (Not a directory)" in panel
    finally:
        store.unlink()
