"""An export is claimed in one short transaction, copied with nothing locked, and recorded in another (issue 21,
item 3): a large workspace holds no run row and no supervisor pass while it is copied; a copy cut off by a
supervisor's death is taken over later, and only one outcome is ever recorded."""

import sqlite3
import subprocess
import sys
import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone

from recovery.models import Export
from recovery.supervisor.loop import supervise_once
from recovery.workspaces import exports
from tasks.models import Event, Run
from tests.processes import ROOT, child_env, wait_for
from tests.recovery import engine as e
from tests.recovery.workdisk import finish_all

W = "file_write"


def succeeded_task(org, dest):
    task = e.start(org, [(W, {"path": "notes.md", "content": "# 1.4\n"})], export_destination=str(dest))
    finish_all(e.first_run(task))
    return task


def nothing_locks(run: Run) -> bool:
    """Another connection can lock the run's row (PostgreSQL) or take SQLite's write lock at once."""
    if connection.vendor == "postgresql":
        with transaction.atomic():
            Run.objects.select_for_update(nowait=True).filter(pk=run.pk).first()
        return True
    other = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None, timeout=0.5)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
        return True
    finally:
        other.close()


@pytest.mark.django_db(transaction=True)
def test_an_export_is_copied_with_nothing_locked_and_the_page_says_it_is_under_way(
    org, agent, admin_user, export_root, monkeypatch
):
    task = succeeded_task(org, export_root / "site")
    copying, release = threading.Event(), threading.Event()
    real = exports.copy_workspace

    def held_copy(task, dest):  # the copy pauses midway, as a large workspace's would
        copying.set()
        assert release.wait(30)
        return real(task, dest)

    monkeypatch.setattr(exports, "copy_workspace", held_copy)
    done = []
    worker = threading.Thread(target=lambda: (done.extend(exports.exports_run(label="sup-a")), connection.close()))
    worker.start()
    try:
        assert copying.wait(30)
        assert nothing_locks(e.first_run(task))
        client = Client()
        client.force_login(admin_user)
        page = client.get(f"/tasks/{task.pk}/").content.decode()
        assert f"Exporting to {export_root / 'site'} since" in page and "the copy is under way" in page
        # A pass meanwhile neither waits for the copy nor starts another one of the same run.
        assert supervise_once(label="sup-b").exported == []
    finally:
        release.set()
        worker.join(30)
    export = Export.objects.get(task=task)
    assert done == [export.pk] and export.ok and export.finished_at is not None
    assert (export_root / "site" / "notes.md").read_text() == "# 1.4\n"


def test_a_copy_cut_off_is_taken_over_once_stale_and_only_one_outcome_is_recorded(org, agent, export_root):
    task = succeeded_task(org, export_root / "site")
    run = e.first_run(task)
    first = exports.export_claim(run_id=run.pk, label="sup-a")  # then sup-a dies mid-copy
    assert first is not None and exports.export_claim(run_id=run.pk, label="sup-b") is None
    assert exports.exports_run(label="sup-b") == []  # fresh: nobody takes it over yet
    Export.objects.filter(pk=first.pk).update(created_at=timezone.now() - timedelta(hours=1))
    assert exports.exports_run(label="sup-b") == [first.pk]
    # sup-a was only slow, not dead: its late outcome is not recorded over sup-b's.
    assert not exports.export_finish(export=first, result={"counts": {}}, ok=False, error="late", actor="supervisor")
    export = Export.objects.get(pk=first.pk)
    assert export.ok and export.claimed_by == "sup-b" and export.error == ""
    assert Event.objects.filter(task=task, kind__startswith="workspace_export").count() == 1
    assert exports.exports_run(label="sup-c") == []


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_supervisor_process_exports_in_a_thread_of_its_own(org, agent, export_root):
    task = succeeded_task(org, export_root / "site")
    env = child_env(CONSOLE_EXPORTS=str(export_root))
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "supervise", "--interval", "0.3", "--label", "sup-thread"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for(lambda: Export.objects.filter(task=task, finished_at__isnull=False).exists(), what="the export")
    finally:
        proc.terminate()
        out = proc.communicate(timeout=30)[0]
    assert proc.returncode == 0, out
    export = Export.objects.get(task=task)
    assert export.ok and export.claimed_by == "sup-thread", export.error
    assert (export_root / "site" / "notes.md").read_text() == "# 1.4\n"
