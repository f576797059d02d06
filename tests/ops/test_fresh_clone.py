"""A clone that has never run anything: no var/ directory, no database file, no DATABASE_URL."""

import os
import subprocess
import sys

import pytest

from tests.processes import ROOT

pytestmark = pytest.mark.slow


def _fresh_env(var_dir) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CONSOLE_SQLITE_TEST_NAME")}
    env.update({"CONSOLE_VAR": str(var_dir), "PYTHONUNBUFFERED": "1"})
    env.pop("CONSOLE_WORKSPACES", None)
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    return env


def test_the_suite_runs_where_no_state_directory_exists_yet(tmp_path):
    var_dir = tmp_path / "never-created" / "var"
    assert not var_dir.exists()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "--create-db",
            "tests/tasks/test_commands.py::test_create_org_twice_creates_it_once",
        ],
        cwd=ROOT,
        env=_fresh_env(var_dir),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (var_dir / "test.sqlite3").exists()


def test_migrate_creates_the_embedded_database_in_a_missing_directory(tmp_path):
    var_dir = tmp_path / "var"
    env = _fresh_env(var_dir)
    env.update({"DJANGO_SETTINGS_MODULE": "console.settings", "DEBUG": "1"})
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
