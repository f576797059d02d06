"""`manage.py supervise` records its passes under its label, and says when it stopped cleanly."""

import signal
import subprocess
import sys

import pytest

from recovery.models import SupervisorProcess
from tests.processes import ROOT, child_env, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_supervisor_process_counts_its_passes_and_a_clean_stop_is_not_silence(operator, client):
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "supervise", "--interval", "0.2", "--label", "sup-test"],
        cwd=ROOT,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for(lambda: SupervisorProcess.objects.filter(label="sup-test", passes__gte=3).exists(), what="passes")
        client.force_login(operator)
        assert 'data-supervisor-alive="true"' in client.get("/workers/").content.decode()
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0, out
    process = SupervisorProcess.objects.get(label="sup-test")
    assert process.stopped_at is not None and process.interval == 0.2
    html = client.get("/workers/").content.decode()
    assert 'sup-test</code> <span class="muted">stopped <time' in html
