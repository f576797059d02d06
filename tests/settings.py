"""The real settings with test defaults for what a developer's shell may not set."""

import os

os.environ.setdefault("SECRET_KEY", "test-secret-key-not-for-production-0123456789abcdef")
os.environ.setdefault("CONSOLE_HTTPS", "0")
os.environ.setdefault(
    "CONSOLE_WORKSPACES", os.path.join(os.path.dirname(os.path.dirname(__file__)), "var", "test-workspaces")
)

from console.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
LOGGING["root"]["level"] = "WARNING"  # noqa: F405
