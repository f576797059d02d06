"""A clone that has never run anything: no var/ directory, no database file, no DATABASE_URL."""

import os
import subprocess
import sys

import psycopg
import pytest
from psycopg import sql

from tests.processes import ROOT

pytestmark = pytest.mark.slow


def _fresh_env(var_dir) -> dict:
    # Nothing of this run's own set-up: its database, its workspaces, the pytest-xdist worker it runs in.
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "CONSOLE_SQLITE_TEST_NAME") and not k.startswith("PYTEST_")
    }
    env.update({"CONSOLE_VAR": str(var_dir), "PYTHONUNBUFFERED": "1"})
    env.pop("CONSOLE_WORKSPACES", None)
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    return env


# A test with a database, one that writes workspace files, and one that runs a real worker process.
FIRST_TESTS = [
    "tests/tasks/test_commands.py::test_create_org_twice_creates_it_once",
    "tests/recovery/test_workspaces.py::test_every_file_changing_step_records_the_manifest_in_its_own_transaction",
    "tests/tasks/test_worker_process.py::test_a_worker_runs_real_tools_in_the_workspace_and_succeeds",
]


def test_the_suite_runs_where_no_state_directory_exists_yet(tmp_path):
    var_dir = tmp_path / "never-created" / "var"
    assert not var_dir.exists()
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--create-db", *FIRST_TESTS[:2]],
        cwd=ROOT,
        env=_fresh_env(var_dir),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout
    assert (var_dir / "test.sqlite3").exists()


def test_the_suite_runs_on_postgresql_where_no_state_directory_exists_yet(tmp_path):
    """The same with DATABASE_URL: nothing of the SQLite path (which creates var/) runs first."""
    var_dir = tmp_path / "never-created" / "var"
    env = _fresh_env(var_dir)
    env["DATABASE_URL"] = os.environ.get("DATABASE_URL", "")
    if not env["DATABASE_URL"].startswith("postgres"):
        env["DATABASE_URL"] = "postgres://postgres@127.0.0.1:5432/postgres"  # the server every machine here runs
    env["CONSOLE_PG_TEST_NAME"] = name = f"test_fresh_clone_{os.getpid()}"
    try:
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--create-db", *FIRST_TESTS],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        # The run keeps its database (the suite's --reuse-db): drop it, or every run leaves one on the server.
        with psycopg.connect(env["DATABASE_URL"], autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout
    assert not (var_dir / "test.sqlite3").exists()


def test_migrate_creates_the_embedded_database_in_a_missing_directory(tmp_path):
    var_dir = tmp_path / "var"
    env = _fresh_env(var_dir)
    env.update({"DJANGO_SETTINGS_MODULE": "config.settings", "DEBUG": "1"})
    env.pop("SECRET_KEY", None)
    result = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (var_dir / "console.sqlite3").exists()
