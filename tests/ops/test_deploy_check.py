"""Production settings pass Django's deployment checks with warnings treated as failures.

CI runs the same command after the suite; this keeps a warning from any app (the schema's
enum names included) from being found only there.
"""

import os
import subprocess
import sys

import pytest

from tests.processes import ROOT

pytestmark = pytest.mark.slow


def test_check_deploy_with_production_settings_reports_nothing():
    # As a deployment runs it: without the suite's own switches (the live-server tests allow sync ORM calls).
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DJANGO_ALLOW_ASYNC_UNSAFE")}
    env.update(
        {
            "DEBUG": "0",
            "CONSOLE_HTTPS": "1",
            "ALLOWED_HOSTS": "console.example.com",
            "SECRET_KEY": "a-production-like-key-" + "k" * 40,
        }
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout
