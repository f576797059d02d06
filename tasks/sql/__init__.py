"""Named SQL: the one-statement PostgreSQL paths, kept in `.sql` files beside this module and loaded by name.

A file holds statements as blocks headed `-- name: <name>`. Table names, column lists and state literals are
`{placeholders}` filled once, from the models' metadata and the machines' tables (`tasks.transitions`), by the
module that runs the statement — never typed by hand, so no move or event is restated; every value is a
`%(param)s`. tests/tasks/test_named_sql.py checks each move a statement makes against its machine.
"""

from functools import cache
from pathlib import Path

import psycopg
from django.conf import settings
from django.db import connection

HERE = Path(__file__).resolve().parent


@cache
def _blocks(file: str) -> dict[str, str]:
    blocks: dict[str, list[str]] = {}
    current = None
    for line in (HERE / f"{file}.sql").read_text().splitlines():
        if line.startswith("-- name:"):
            current = line.removeprefix("-- name:").strip()
            blocks[current] = []
        elif current is not None:
            blocks[current].append(line)
    return {name: "\n".join(lines).strip() for name, lines in blocks.items()}


def named(file: str, name: str, **values) -> str:
    """The statement `name` of `file`.sql with its placeholders filled (a missing one is a KeyError)."""
    return _blocks(file)[name].format(**values)


def quoted(values) -> str:
    """State literals for an `IN (…)` list: enum values only, never input."""
    return ", ".join(f"'{v}'" for v in values)


def columns(model, alias: str) -> str:
    return ", ".join(f'{alias}."{f.column}"' for f in model._meta.concrete_fields)


def from_row(model, values):
    """A model instance from a row's values, converted as the ORM converts them (JSON arrives as text)."""
    fields = model._meta.concrete_fields
    converted = [
        f.from_db_value(v, None, connection) if v is not None and hasattr(f, "from_db_value") else v
        for f, v in zip(fields, values, strict=True)
    ]
    return model.from_db(connection.alias, [f.attname for f in fields], converted)


# psycopg prepares only on a connection with a `prepare_threshold`, and Django opens its connections with none. A
# threshold left on the connection would also make psycopg count every query Django sends (up to 100 query texts
# kept per connection: the bulk preview's peak memory grew with its scope), so it is set for these statements'
# execution alone, at a value no count reaches.
ONLY_WHEN_ASKED = 2**62


class _PreparedCursor(psycopg.Cursor):
    """Server-side parameters and a statement prepared once per connection (pooled connections keep it):
    neither the query text nor its plan is built again on every call (planning took longer than running).
    With CONSOLE_DB_PREPARE off, parsed and planned on every call."""

    def execute(self, query, params=None, *, prepare=None, binary=None):
        if not settings.CONSOLE_DB_PREPARE:
            return super().execute(query, params, prepare=False, binary=binary)
        self.connection.prepare_threshold = ONLY_WHEN_ASKED
        try:
            return super().execute(query, params, prepare=True if prepare is None else prepare, binary=binary)
        finally:
            self.connection.prepare_threshold = None


def prepared_cursor():
    """A cursor of the default connection that prepares its statements, wrapped as Django's own are
    (errors translated, and logged where queries are: the query-count tests see these statements too)."""
    connection.ensure_connection()
    raw = _PreparedCursor(connection.connection)
    return connection.make_debug_cursor(raw) if connection.queries_logged else connection.make_cursor(raw)


def fetch_one(sql: str, params: dict):
    with prepared_cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()
