"""The real settings with test defaults for what a developer's shell may not set."""

import os

os.environ.setdefault("SECRET_KEY", "test-secret-key-not-for-production-0123456789abcdef")
os.environ.setdefault("CONSOLE_HTTPS", "0")
# A run on PostgreSQL and one on SQLite may share a checkout at the same time: each has its own root.
_kind = "-postgres" if os.environ.get("DATABASE_URL", "").startswith("postgres") else ""
os.environ.setdefault(
    "CONSOLE_WORKSPACES",
    os.path.join(
        os.environ.get("CONSOLE_VAR") or os.path.join(os.path.dirname(os.path.dirname(__file__)), "var"),
        "test-workspaces" + _kind,
    ),
)
# Each pytest-xdist worker gets a workspaces root of its own (pytest-django suffixes its test database). The
# controller imported this module before starting the workers, so they inherit its root and extend it.
if (_worker := os.environ.get("PYTEST_XDIST_WORKER")) and not os.environ["CONSOLE_WORKSPACES"].endswith(_worker):
    os.environ["CONSOLE_WORKSPACES"] += f"-{_worker}"

from config.settings import *  # noqa: E402, F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
LOGGING["root"]["level"] = "WARNING"  # noqa: F405
