"""Tool calls are bounded, in a real worker process: a FIFO never blocks it, a Stop ends a run within the drain
time whatever the tool does, and a command's output never takes the worker's memory."""

import subprocess
import time

import pytest

from tasks.models import Run, Step
from tasks.services import run_request_stop, task_create
from tests import processes
from tests.factories import worker_token
from tests.helpers import plan
from tests.processes import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

DRAIN = 3.0


@pytest.fixture
def started():
    """Workers a test started; one still running at its end (a failed test) is killed."""
    procs: list[subprocess.Popen] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def start_worker(server, token: str, started: list) -> subprocess.Popen:
    proc = processes.start_worker(server, token, label="bounds", CONSOLE_WORKER_DRAIN_SECONDS=DRAIN)
    started.append(proc)
    return proc


def finished(proc: subprocess.Popen, timeout: float) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        raise AssertionError(f"the worker was still running after {timeout} s:\n{out}") from None
    return out


def step(run: Run, seq: int) -> Step | None:
    return Step.objects.filter(run=run, seq=seq).first()


def test_a_file_write_to_a_fifo_fails_at_once_and_the_run_goes_on_to_its_end(daphne_server, org, agent, started):
    task = task_create(
        org=org,
        actor="t",
        title="fifo",
        agent="builder",
        input=plan(("bash", {"command": "mkfifo fifo"}), ("file_write", {"path": "fifo", "content": "x"})),
    )
    proc = start_worker(daphne_server, worker_token(org), started)
    out = finished(proc, 30)
    run = Run.objects.get(task=task)
    written = step(run, 2)
    assert written is not None and written.phase == "failed", out
    assert "fifo: not a regular file (a FIFO" in written.error
    run.refresh_from_db()
    assert run.status == "failed" and run.error_code == "step_failed"


def test_a_stop_ends_a_run_within_the_drain_time_whatever_its_tool_is_doing(daphne_server, org, agent, started):
    task = task_create(
        org=org,
        actor="t",
        title="long",
        agent="builder",
        input=plan(("bash", {"command": "sleep 300", "timeout": 600}), ("sleep", {"seconds": 0})),
    )
    proc = start_worker(daphne_server, worker_token(org), started)
    run = Run.objects.get(task=task)
    wait_for(lambda: (s := step(run, 1)) is not None and s.phase == "dispatched", what="the bash dispatched")
    asked = time.monotonic()
    run_request_stop(actor="t", run=run)
    # The heartbeat (1 s) carries the Stop; the command may go on for its grace, then the run is stopped.
    wait_for(lambda: Run.objects.get(pk=run.pk).status == "stopped", timeout=DRAIN + 10, what="the run stopped")
    took = time.monotonic() - asked
    out = finished(proc, 10)
    assert took < DRAIN + 2, f"stopped after {took:.1f} s:\n{out}"
    run.refresh_from_db()
    assert run.stop_receipt["by"] == "worker" and "during step 1" in run.error_detail
    # Cut short, the command records no outcome: recovery treats it by its mode.
    cut = step(run, 1)
    assert cut.phase == "dispatched" and cut.result is None
    assert step(run, 2) is None


def _peak_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_a_command_printing_600_mb_keeps_one_mib_and_the_worker_stays_small(daphne_server, org, agent, started):
    total = 600_000_000
    task = task_create(
        org=org,
        actor="t",
        title="loud",
        agent="builder",
        input=plan(("bash", {"command": f"yes | head -c {total}", "timeout": 120}), ("sleep", {"seconds": 3})),
    )
    proc = start_worker(daphne_server, worker_token(org), started)
    run = Run.objects.get(task=task)
    wait_for(lambda: step(run, 2) is not None, timeout=120, what="the command's step completed")
    peak = _peak_rss_kib(proc.pid)
    out = finished(proc, 30)
    assert peak < 250_000, f"the worker's peak memory was {peak} KiB:\n{out}"
    result = step(run, 1).result
    assert result["stdout_bytes"] == total and len(result["stdout"]) == 1024 * 1024 and result["truncated"]
    assert result["note"] == f"stdout: {1024 * 1024} of {total} bytes kept, the rest counted and discarded"
