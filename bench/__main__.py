"""`make bench`: every speed figure as a ratio to a baseline measured in the same run.

    python -m bench                 # every figure
    python -m bench claims board    # the figures of those modules (or figure names)
    python -m bench --list          # what there is

Database: a throwaway SQLite file `var/bench/bench.sqlite3`; with
`DATABASE_URL=postgres://…` a database `bench_console` is created on that
server instead. Either is dropped at the end, with the workspaces the bench
made (BENCH_KEEP_DB=1 keeps the database). Results: a table on stdout and
`var/bench/results.json`, a list of records {"name", "value", "unit",
"baseline", "baseline_value", "ratio", "target_ratio", "better"}.

Each figure has a time budget and is told its deadline; one still running at
twice its budget is interrupted and reported as not measured. It reports; it
never fails on speed (exit status 1 only when a figure could not run at all).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
import traceback
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from bench.core import BASE_DIR, BENCH_DIR, Context, Record, Timeout, discover, hard_limit, machine, markdown, table

# BENCH_DB_NAME names the PostgreSQL database the bench creates and drops (the suite's smoke test uses its own,
# so a `make bench` and a `make test` on one server never drop each other's).
BENCH_DB_NAME = os.environ.get("BENCH_DB_NAME") or "bench_console"
if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", BENCH_DB_NAME):
    raise SystemExit(f"bench: BENCH_DB_NAME must be a lower-case SQL identifier, not {BENCH_DB_NAME!r}")
# BENCH_BUDGET_SCALE shrinks (or grows) every figure's time budget: the suite's smoke test runs one figure briefly.
SCALE = float(os.environ.get("BENCH_BUDGET_SCALE") or 1)
WORKSPACES = BENCH_DIR / f"workspaces-{os.getpid()}"


def _configure_environment() -> str | None:
    """Point the settings at a throwaway database before Django loads them. Returns the server URL (PG)."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    os.environ.setdefault("SECRET_KEY", "bench-only-secret-key-" + "0123456789abcdef" * 3)
    os.environ.setdefault("DEBUG", "0")
    os.environ.setdefault("CONSOLE_HTTPS", "0")  # the test client and the bench's daphne speak plain http
    os.environ["CONSOLE_WORKSPACES"] = str(WORKSPACES)
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    server_url = os.environ.get("DATABASE_URL", "")
    if server_url.startswith(("postgres://", "postgresql://")):
        parts = urlsplit(server_url)
        os.environ["DATABASE_URL"] = urlunsplit(parts._replace(path="/" + BENCH_DB_NAME))
        _pg_admin(
            server_url, f"DROP DATABASE IF EXISTS {BENCH_DB_NAME} WITH (FORCE)", f"CREATE DATABASE {BENCH_DB_NAME}"
        )
        return server_url
    if server_url:
        raise SystemExit(f"bench: unsupported DATABASE_URL {server_url.split(':', 1)[0]}://… (SQLite or PostgreSQL)")
    _drop_sqlite()
    os.environ["DATABASE_URL"] = f"sqlite:///{BENCH_DIR / 'bench.sqlite3'}"
    return None


def _drop_sqlite() -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{BENCH_DIR / 'bench.sqlite3'}{suffix}").unlink(missing_ok=True)


def _pg_admin(server_url: str, *statements: str) -> None:
    import psycopg

    with psycopg.connect(server_url, autocommit=True) as conn:
        for sql in statements:
            conn.execute(sql)


def _select(figures, words: list[str]):
    if not words:
        return figures
    chosen = [f for f in figures if f.group in words or set(f.names) & set(words)]
    known = {f.group for f in figures} | {n for f in figures for n in f.names}
    unknown = [w for w in words if w not in known]
    if unknown:
        raise SystemExit(f"bench: unknown figure or group: {', '.join(unknown)} (python -m bench --list)")
    return chosen


def main(argv: list[str]) -> int:
    figures = discover()
    if "--list" in argv:
        for f in figures:
            print(f"{f.group:<12} {', '.join(f.names):<48} budget {f.budget:g} s")
        return 0
    chosen = _select(figures, argv)
    server_url = _configure_environment()
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection, connections

    started = time.monotonic()
    records: list[Record] = []
    failed = False
    try:
        t = time.monotonic()
        call_command("migrate", verbosity=0)
        print(
            f"bench: {connection.vendor} database {connection.settings_dict['NAME']} (migrated in "
            f"{time.monotonic() - t:.1f} s); {machine()}",
            flush=True,
        )
        total = sum(f.budget for f in chosen) * SCALE
        print(f"bench: {len(chosen)} figure groups, budgets {total:g} s in all\n", flush=True)
        for f in chosen:
            budget = f.budget * SCALE
            ctx = Context(
                vendor=connection.vendor,
                deadline=time.monotonic() + budget,
                budget=budget,
                scratch=BENCH_DIR,
                server_url=server_url,
            )
            t = time.monotonic()
            print(f"== {', '.join(f.names)} (budget {budget:g} s)", flush=True)
            try:
                with hard_limit(2 * budget):
                    produced = f.fn(ctx)
            except Timeout:
                produced = [_missing(n, f"interrupted after {2 * budget:g} s") for n in f.names]
                failed = True
            except Exception as exc:
                traceback.print_exc()
                produced = [_missing(n, f"failed: {type(exc).__name__}: {exc}") for n in f.names]
                failed = True
            finally:
                connections.close_all()
            for r in produced:
                print(f"   {r.name}: {_line(r)}", flush=True)
            print(f"   ({time.monotonic() - t:.1f} s)\n", flush=True)
            records += produced
    finally:
        connections.close_all()
        if os.environ.get("BENCH_KEEP_DB") != "1":
            if server_url:
                _pg_admin(server_url, f"DROP DATABASE IF EXISTS {BENCH_DB_NAME} WITH (FORCE)")
            else:
                _drop_sqlite()
        shutil.rmtree(WORKSPACES, ignore_errors=True)
        if not failed:  # the daphne logs of the socket and runner figures: kept only to explain a failure
            for log in BENCH_DIR.glob("daphne-*.log"):
                log.unlink(missing_ok=True)
    elapsed = time.monotonic() - started
    out = BENCH_DIR / "results.json"
    out.write_text(json.dumps([r.as_json() for r in records], indent=2) + "\n")
    (BENCH_DIR / "results.md").write_text(markdown(records) + "\n")
    print(table(records))
    print(f"\nbench: {connection.vendor}, done in {elapsed:.0f} s; {os.path.relpath(out, BASE_DIR)} (and results.md)")
    return 1 if failed else 0


def _missing(name: str, why: str) -> Record:
    return Record(name=name, value=None, unit="", baseline=why, baseline_value=None, target_ratio=None, better="lower")


def _line(r: Record) -> str:
    ratio = f"{r.ratio:.3g}×" if r.ratio is not None else "-"
    return f"{r.value} {r.unit} vs {r.baseline}: {r.baseline_value} → {ratio} ({r.verdict})"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
