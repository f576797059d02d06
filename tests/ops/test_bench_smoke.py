"""`make bench` on this machine's terms, briefly: one figure with a shrunken budget, on the suite's database.

It must run from a state directory that does not exist yet, write results.json in the issue's record shape
(the ratio is value / baseline_value), and drop what it made (its database, its workspaces).
"""

import json
import os
import subprocess
import sys

import psycopg
import pytest

from tests.processes import ROOT

pytestmark = pytest.mark.slow

KEYS = ["name", "value", "unit", "baseline", "baseline_value", "ratio", "target_ratio", "better"]


def test_one_figure_runs_writes_its_record_and_leaves_nothing_behind(tmp_path):
    var_dir = tmp_path / "var"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONSOLE_", "DJANGO_"))}
    database = f"bench_smoke_{os.getpid()}"
    env.update(
        {"CONSOLE_VAR": str(var_dir), "BENCH_BUDGET_SCALE": "0.1", "BENCH_DB_NAME": database, "PYTHONUNBUFFERED": "1"}
    )
    result = subprocess.run(
        [sys.executable, "-m", "bench", "checkpoint"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    records = json.loads((var_dir / "bench" / "results.json").read_text())
    assert [list(r) for r in records] == [KEYS]
    (r,) = records
    assert r["name"] == "checkpoint_vs_bare_commits" and r["unit"] == "ms" and r["better"] == "lower"
    assert r["value"] > 0 and r["baseline_value"] > 0 and r["target_ratio"] == 1.5
    assert r["ratio"] == pytest.approx(r["value"] / r["baseline_value"], rel=0.01)
    assert "checkpoint_vs_bare_commits" in (var_dir / "bench" / "results.md").read_text()
    assert "checkpoint_vs_bare_commits" in result.stdout
    assert "meets goal" in result.stdout or "misses goal" in result.stdout  # a verdict, not "not measured"
    left = sorted(p.name for p in (var_dir / "bench").iterdir())
    assert left == ["results.json", "results.md"], left  # no database file, no workspaces, no logs
    if os.environ.get("DATABASE_URL", "").startswith("postgres"):
        with psycopg.connect(os.environ["DATABASE_URL"]) as conn:
            found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database]).fetchone()
        assert found is None  # the bench's database was dropped
