"""bin/procs: honcho runs a Procfile; Ctrl-C stops every process, and a process that dies is named with why."""

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.processes import ROOT, wait_for

pytestmark = pytest.mark.slow


def start(procfile: Path, tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    log = tmp_path / "procs.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "bin" / "procs"), "-f", str(procfile), "-p", "8999"],
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={"PATH": "/usr/bin:/bin", "CONSOLE_WORKER_DRAIN_SECONDS": "1"},
        )
    return proc, log


def test_a_process_that_dies_is_named_with_why_and_the_others_are_stopped(tmp_path):
    procfile = tmp_path / "Procfile"
    procfile.write_text(
        "web: exec sleep 60\n"
        "worker: echo 'worker: the token was refused' && exit 3\n"
        f"supervisor: exec {sys.executable} -c 'import time; time.sleep(60)'\n"
    )
    proc, log = start(procfile, tmp_path)
    assert proc.wait(timeout=30) == 3
    out = log.read_text()
    assert "worker.1     | worker: the token was refused" in out
    assert "worker.1 died: it exited with status 3; its last lines above say why. Stopping the other processes." in out
    assert "sending SIGTERM to web.1" in out and "sending SIGTERM to supervisor.1" in out
    assert "web.1 stopped" in out and "supervisor.1 stopped" in out


def test_a_killed_process_is_named_with_its_signal(tmp_path):
    procfile = tmp_path / "Procfile"
    procfile.write_text("web: exec sleep 60\nworker: kill -9 $$\n")
    proc, log = start(procfile, tmp_path)
    proc.wait(timeout=30)
    assert "worker.1 died: it was killed by SIGKILL." in log.read_text()


def test_ctrl_c_stops_every_process_and_waits_for_a_draining_one(tmp_path):
    marker = tmp_path / "drained"
    drainer = (
        "import signal, sys, time\n"
        "def stop(*_):\n"
        "    time.sleep(0.5)\n"  # a short drain, well within the manager's grace
        f"    open({str(marker)!r}, 'w').write('ok')\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    (tmp_path / "drainer.py").write_text(drainer)
    procfile = tmp_path / "Procfile"
    procfile.write_text(f"web: exec sleep 60\nworker: exec {sys.executable} drainer.py\nsupervisor: exec sleep 60\n")
    proc, log = start(procfile, tmp_path)
    wait_for(lambda: "worker.1     | ready" in log.read_text(), timeout=20, what="all started")
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 130
    out = log.read_text()
    assert time.monotonic() - started < 10
    assert "SIGINT received" in out and "died" not in out
    for name in ("web.1", "worker.1", "supervisor.1"):
        assert f"{name} stopped" in out
    assert marker.read_text() == "ok"


@pytest.mark.django_db(transaction=True)
def test_the_real_procfile_serves_web_worker_and_supervisor_and_ctrl_c_stops_all_three(tmp_path, org):
    import httpx

    from tests.factories import worker_token
    from tests.processes import child_env, free_port

    port = free_port()
    env = child_env(
        CONSOLE_URL=f"http://127.0.0.1:{port}",
        CONSOLE_WORKER_TOKEN=worker_token(org),
        CONSOLE_SUPERVISE_SECONDS=1,
        CONSOLE_WORKER_DRAIN_SECONDS=2,
    )
    log = tmp_path / "procs.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "bin/procs", "-p", str(port)], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env
        )
    try:
        wait_for(
            lambda: httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200 if _up(port) else 0,
            timeout=60,
            what="web answers /healthz",
        )
        wait_for(lambda: "supervisor pass" in log.read_text() or "one pass every" in log.read_text(), timeout=30)
        wait_for(lambda: "slot(s) against" in log.read_text(), timeout=30, what="the worker started")
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=40)
    out = log.read_text()
    assert code == 130, out
    for name in ("web.1", "worker.1", "supervisor.1"):
        assert f"{name} stopped" in out, out
    assert "died" not in out, out


def _up(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0
