"""Workspace scenarios with real files: the engine's services, and the reference worker's real tools on disk.

`tool_step` is what a worker does for one step — plan, dispatch, run the tool
in the task's workspace, complete (reporting the files it changed) — without a
worker process; `crash_at` leaves a step dispatched and lapses the lease.
"""

import hashlib
import os
from pathlib import Path

from recovery.models import RecoveryAction
from recovery.supervisor.loop import supervise_once
from recovery_console.reference.tools import ToolContext, changed_files, run_tool
from tasks import services
from tasks.models import Run, Task
from tests.recovery import engine as e


def tool_step(run: Run, seq: int) -> dict:
    """Plan, dispatch, run the real tool in the workspace, and complete step `seq`; returns its result."""
    call = run.input["steps"][seq - 1]
    e.plan_step(run, seq)
    e.dispatch_step(run, seq)
    task = Task.objects.get(pk=run.task_id)
    result = run_tool(call["tool"], call["args"], ToolContext(workspace=task.workspace))
    services.step_complete(
        worker=run.lease_worker,
        run_id=run.pk,
        epoch=run.lease_epoch,
        seq=seq,
        ok=True,
        result=result,
        files=changed_files(call["tool"], call["args"]) or None,
    )
    return result


def run_steps(run: Run, upto: int | None = None) -> None:
    """Run every step from the first unfinished one up to `upto` (default: the end) with real tools."""
    last = upto if upto is not None else len(run.input["steps"])
    for seq in range(e.next_seq(run), last + 1):
        tool_step(run, seq)


def crash_at(run: Run, seq: int) -> Run:
    """Claim `run`, run its steps before `seq` for real, dispatch `seq`, and die: the lease lapses."""
    run = e.claim(run)
    run_steps(run, seq - 1)
    e.plan_step(run, seq)
    e.dispatch_step(run, seq)
    e.lapse()
    run.refresh_from_db()
    assert run.status == "interrupted", run.status
    return run


def finish_all(run: Run) -> Run:
    """Claim `run` and run it to the end with real tools."""
    run = e.claim(run)
    run_steps(run)
    return e.finish(run)


def edit_by_hand(task: Task, path: str, content: str | bytes, *, later: bool = True) -> Path:
    """A person changes a file in the workspace (its mtime moved forward so it reads as newer)."""
    task.refresh_from_db()
    target = Path(task.workspace) / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(content.encode() if isinstance(content, str) else content)
    if later:
        st = target.stat()
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    return target


def sha(content: str | bytes) -> str:
    return hashlib.sha256(content.encode() if isinstance(content, str) else content).hexdigest()


def validation_action(task: Task) -> RecoveryAction:
    return RecoveryAction.objects.get(task=task, kind="workspace_validation", status="open")


def supervise() -> None:
    supervise_once()


def contents(root: str | Path) -> dict[str, bytes]:
    """Every regular file under `root` (links not followed), by relative path."""
    out = {}
    root = Path(root)
    if not root.is_dir():
        return out
    for dirpath, _dirs, files in os.walk(root, followlinks=False):
        for name in files:
            p = Path(dirpath) / name
            if p.is_symlink() or not p.is_file():
                continue
            out[str(p.relative_to(root))] = p.read_bytes()
    return out
