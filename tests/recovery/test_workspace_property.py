"""Property (Hypothesis): after any repair, every byte of content that existed before still exists somewhere.

Random trees are written by real tool steps, the run is cut off, a person
edits (changes, adds, deletes, links to the outside), and an admin runs a
repair — reconcile, isolated reissue, or a retry export into a destination
that already holds files. Whatever each file held before the repair is then
found again under the task's workspace, its held copies, or the destination.
"""

import itertools
import os
from pathlib import Path

import pytest
from django.test import override_settings
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from recovery.models import HeldCopy, RecoveryAction
from recovery.supervisor.loop import supervise_once
from recovery.workspaces.repairs import action_repair
from tasks.errors import NotEligible
from tasks.models import ExportRoot, Task
from tests.factories import make_agent, make_org
from tests.recovery import engine as e
from tests.recovery.workdisk import contents, crash_at, finish_all

pytestmark = pytest.mark.django_db

PATHS = [f"{d}{n}" for d in ("", "sub/", "sub/deep/") for n in ("f1.txt", "f2.bin", "g")]
content = st.one_of(st.text(max_size=40).map(str.encode), st.binary(max_size=40))
tree = st.dictionaries(st.sampled_from(PATHS), content, min_size=1, max_size=6)
edit = st.one_of(
    st.tuples(st.just("write"), st.sampled_from(PATHS), content),
    st.tuples(st.just("delete"), st.sampled_from(PATHS), st.just(b"")),
    st.tuples(st.just("link"), st.sampled_from(PATHS), st.just(b"")),
)
_orgs = itertools.count(1)


def _text(data: bytes) -> str:
    # What a plan's `content` can carry in JSON on both databases (PostgreSQL's jsonb refuses \u0000).
    return data.decode("utf-8", "replace").replace("\x00", "")


def _apply(root: Path, edits, outside: Path) -> None:
    for kind, rel, data in edits:
        path = root / rel
        if path.is_symlink() or path.is_file():
            if kind == "delete":
                path.unlink()
                continue
            path.unlink()
        elif kind == "delete":
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if kind == "write":
            path.write_bytes(data)
        else:
            path.symlink_to(outside)


def _everything(task: Task, *extra) -> set[bytes]:
    """Every file's content under the task's workspaces (current and old), its held copies and `extra`."""
    roots = {task.workspace, *(c.path for c in HeldCopy.objects.filter(task=task)), *extra}
    found: set[bytes] = set()
    for root in roots:
        found.update(contents(root).values())
    return found


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    files=tree,
    edits=st.lists(edit, min_size=1, max_size=6),
    rewrite=st.sampled_from(PATHS),
    repair=st.sampled_from(["reconcile", "reissue", "reconcile+reissue", "retry_export"]),
    at_destination=st.dictionaries(st.sampled_from(PATHS), content, max_size=4),
)
def test_no_repair_loses_content(files, edits, rewrite, repair, at_destination, admin_user, tmp_path_factory):
    org = make_org(f"prop{next(_orgs)}")
    make_agent(org, "builder")
    from tests.factories import make_member

    admin = make_member(org, admin_user.username, "admin")
    outside = tmp_path_factory.mktemp("outside") / "secret"
    outside.write_bytes(b"outside the workspace")
    steps = [("file_write", {"path": p, "content": _text(c)}) for p, c in sorted(files.items())]
    # The plan goes on after a cut-off step and writes one file again: reconcile may hold it.
    steps += [("sleep", {"seconds": 0}), ("file_write", {"path": rewrite, "content": "plan"})]

    if repair == "retry_export":
        dest_parent = tmp_path_factory.mktemp("dest")
        dest = dest_parent / "out"
        dest.write_bytes(b"in the way")  # the first export fails: a file where the directory goes
        task = e.start(org, steps[:-2])
        Task.objects.filter(pk=task.pk).update(export_destination=str(dest))
        ExportRoot.objects.create(org=org, path=str(dest_parent), added_by="test")
        finish_all(e.first_run(task))
        with override_settings(CONSOLE_EXPORTS=[dest_parent]):
            supervise_once()
        action = RecoveryAction.objects.get(task=task, kind="workspace_export")
        task.refresh_from_db()
        _apply(Path(task.workspace), edits, outside)
        # The cause is fixed, by a person who also leaves files of their own there.
        dest.unlink()
        for rel, data in at_destination.items():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            (dest / rel).write_bytes(data)
        before = set(contents(task.workspace).values()) | set(contents(dest).values())
        with override_settings(CONSOLE_EXPORTS=[dest_parent]):
            done = action_repair(action_id=action.pk, user=admin, version=action.version, repair="retry_export")
        event(f"retry_export: {done.status}")
        task.refresh_from_db()
        assert before <= _everything(task, dest)
        return

    task = e.start(org, steps)
    crash_at(e.first_run(task), len(steps) - 1)
    task.refresh_from_db()
    _apply(Path(task.workspace), edits, outside)
    before = set(contents(task.workspace).values())
    supervise_once()
    action = RecoveryAction.objects.filter(task=task, kind="workspace_validation").first()
    if action is None:
        event("no difference: nothing to repair")
        return
    for name in repair.split("+"):
        action.refresh_from_db()
        if action.status != "open":
            break
        try:
            done = action_repair(
                action_id=action.pk, user=admin, version=action.version, repair=name, run=action.run_id
            )
            event(f"{name}: {done.status}")
        except NotEligible:
            event(f"{name}: refused")  # a refusal changes nothing; the property must hold all the same
        task.refresh_from_db()
        assert before <= _everything(task)
    assert outside.read_bytes() == b"outside the workspace"
    for copy in HeldCopy.objects.filter(task=task).exclude(reason="reissue"):
        for dirpath, dirs, names in os.walk(copy.path):
            assert not any(os.path.islink(os.path.join(dirpath, n)) for n in dirs + names)
