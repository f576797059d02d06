"""A supervisor survives any database error: the failing duty is logged and counted in /metrics, the other duties
of the pass still run, and the next pass runs. A real `manage.py supervise` against a real fault: SQLite's write
lock held by another connection ("database is locked"), or, on PostgreSQL, its connection killed while it waits on
a lock."""

import signal
import sqlite3
import subprocess
import sys
import time
from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from recovery.models import SupervisorPass, SupervisorProcess
from tasks.models import Run
from tests.ops.metric_samples import samples
from tests.processes import ROOT, child_env, wait_for
from tests.recovery.engine import SAFE, claim, first_run, start

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
LABEL = "sup-faults"
SCRAPE = "scrape-token-0123456789"


def supervisor() -> subprocess.Popen:
    # SQLite: a writer gives up on a held lock after 0.3 s (CONSOLE_SQLITE_TIMEOUT) instead of 30, to keep this short.
    env = child_env(CONSOLE_SQLITE_TIMEOUT="0.3", LOG_LEVEL="INFO")
    return subprocess.Popen(
        [sys.executable, "manage.py", "supervise", "--interval", "0.3", "--label", LABEL],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def passes() -> int:
    return SupervisorProcess.objects.filter(label=LABEL).values_list("passes", flat=True).first() or 0


def errors() -> dict:
    return SupervisorProcess.objects.filter(label=LABEL).values_list("errors", flat=True).first() or {}


def hold_sqlite_write_lock(seconds: float) -> None:
    """Another process's writer holds SQLite's one write lock: every write of the supervisor meets it."""
    locker = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None, timeout=30)
    try:
        locker.execute("BEGIN IMMEDIATE")
        time.sleep(seconds)
    finally:
        locker.execute("ROLLBACK")
        locker.close()


def kill_supervisor_connection_mid_duty() -> None:
    """The supervisor's pruning of worker instances waits on a lock; then its connection is killed under it
    (what a database restart or a failover does to every connection)."""
    sd = connection.settings_dict
    params = {"host": sd.get("HOST") or "127.0.0.1", "port": sd.get("PORT") or 5432, "user": sd.get("USER")}
    db = sd["NAME"]
    with psycopg.connect(**params, dbname=db) as locker, psycopg.connect(**params, dbname=db, autocommit=True) as admin:
        locker.execute("LOCK TABLE tasks_workerinstance IN ACCESS EXCLUSIVE MODE")

        def waiting() -> list[int]:
            return [
                pid
                for (pid,) in admin.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock'"
                    " AND query ILIKE %s",
                    [db, "%tasks_workerinstance%"],
                ).fetchall()
            ]

        pids = wait_for(waiting, timeout=30, what="the supervisor to wait on the lock")
        for pid in pids:
            admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        locker.rollback()


def test_a_database_error_in_a_pass_is_counted_and_the_supervisor_goes_on(org, agent, settings):
    proc = supervisor()
    out = ""
    try:
        wait_for(lambda: passes() >= 2, timeout=60, what="the first passes")
        if connection.vendor == "sqlite":
            hold_sqlite_write_lock(2.0)
        else:
            kill_supervisor_connection_mid_duty()
        wait_for(lambda: sum(errors().values()) >= 1, timeout=60, what="the failure to be counted")
        assert proc.poll() is None, "the supervisor died on a database error"

        # Recovery runs after the fault: a lease that lapses now is settled by the next passes.
        settings.CONSOLE_LEASE_SECONDS = 1
        run = claim(first_run(start(org, [SAFE])))
        counted = passes()
        wait_for(lambda: Run.objects.get(pk=run.pk).status == "interrupted", timeout=60, what="the lapse to be settled")
        wait_for(lambda: passes() >= counted + 3, timeout=60, what="more passes")
        assert proc.poll() is None

        # /metrics says which duty failed, per supervisor process.
        settings.CONSOLE_METRICS_TOKEN = SCRAPE
        scraped = samples(Client().get("/metrics", headers={"Authorization": f"Bearer {SCRAPE}"}).content.decode())
        failed = {
            dict(key[1:])["duty"]: value
            for key, value in scraped.items()
            if key[0] == "console_supervisor_pass_errors_total" and ("supervisor", LABEL) in key
        }
        assert failed and all(v >= 1 for v in failed.values()), scraped
        assert failed == {duty: float(n) for duty, n in errors().items()}
        if connection.vendor != "sqlite":
            assert "instances_prune" in failed  # the duty whose connection was killed, and only its count
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
    assert proc.returncode == 0, out
    assert "supervisor duty" in out and "failed" in out  # logged, with the duty's name


def test_one_failing_duty_does_not_skip_the_others_of_its_pass(org, agent, settings):
    """The lock stays held, so every pass stops at the same duty (pruning worker instances) again: what the
    failing pass did after that duty — prune old pass records, count itself — shows the rest of it ran."""
    if connection.vendor == "sqlite":
        pytest.skip("SQLite has one write lock for every table: while it is held no write duty can run at all")
    settings.CONSOLE_LEASE_SECONDS = 1
    run = claim(first_run(start(org, [SAFE])))  # its lease lapses in a second
    proc = supervisor()
    sd = connection.settings_dict
    params = {"host": sd.get("HOST") or "127.0.0.1", "port": sd.get("PORT") or 5432, "user": sd.get("USER")}
    db = sd["NAME"]
    try:
        wait_for(lambda: passes() >= 1, timeout=60, what="the first pass")
        with (
            psycopg.connect(**params, dbname=db) as locker,
            psycopg.connect(**params, dbname=db, autocommit=True) as admin,
        ):
            locker.execute("LOCK TABLE tasks_workerinstance IN ACCESS EXCLUSIVE MODE")

            def waiting() -> list[int]:
                rows = admin.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock'"
                    " AND query ILIKE %s",
                    [db, "%tasks_workerinstance%"],
                ).fetchall()
                return [pid for (pid,) in rows]

            pid = wait_for(waiting, timeout=30, what="a pass to wait on the lock")[0]
            process = SupervisorProcess.objects.get(label=LABEL)
            stale = SupervisorPass.objects.create(
                supervisor=process, started_at=timezone.now() - timedelta(days=2), duration=0.0, did={}
            )
            admin.execute("SELECT pg_terminate_backend(%s)", [pid])
            # The next pass waits on the same lock again: by then the failed one has done the rest of its duties.
            wait_for(lambda: [p for p in waiting() if p != pid], timeout=30, what="the next pass to wait")
            assert not SupervisorPass.objects.filter(pk=stale.pk).exists()  # passes_prune ran after the failure
            assert errors() == {"instances_prune": 1}  # and the failed pass recorded itself, with its failure
            assert Run.objects.get(pk=run.pk).status == "interrupted"
            locker.rollback()
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
