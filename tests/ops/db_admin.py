"""Shared by test modules (from test_database_busy.py): no test module imports another."""

import psycopg
from django.db import connection


def admin_connection() -> psycopg.Connection:
    sd = connection.settings_dict
    return psycopg.connect(
        host=sd.get("HOST") or "127.0.0.1",
        port=sd.get("PORT") or 5432,
        user=sd.get("USER") or "postgres",
        dbname=sd["NAME"],
        autocommit=False,
    )


def lock_waiters(db: str) -> int:
    with psycopg.connect(host="127.0.0.1", user="postgres", dbname=db, autocommit=True) as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock'", [db]
        ).fetchone()[0]
