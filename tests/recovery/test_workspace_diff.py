"""The pure rules of recovery/rules/workspace_diff.py, kind by kind (no database, no disk)."""

from recovery.rules import workspace_diff as wd

A, B = "a" * 64, "b" * 64


def f(size=1, mtime=10, sha=A, ctime=20, ino=7, **kw) -> wd.Entry:
    return wd.Entry(size, mtime, sha, "file", None, ctime, ino, **kw)


def other(kind: str, link=None, empty=False) -> wd.Entry:
    return wd.Entry(0, 10, None, kind, link, 20, 7, empty)


def status(recorded, actual, **kw):
    diffs = wd.compare({"p": recorded} if recorded else {}, {"p": actual} if actual else {}, **kw)
    return [(d.status, d.verified) for d in diffs]


def test_a_file_is_the_same_by_its_identity_or_by_its_content():
    assert status(f(), f(sha=None)) == [("same", True)]  # size, times and inode unmoved: not read
    assert status(f(), f(ctime=21, sha=A)) == [("same", True)]  # touched, same content
    assert status(f(), f(ctime=21, sha=B)) == [("changed", True)]
    assert status(f(), f(size=2, ctime=21, sha=None)) == [("changed", True)]  # the size says it
    # Times moved and the content could not be read: a difference, and not a verified one.
    assert status(f(), f(ctime=21, sha=None)) == [("changed", False)]
    # A record without a ctime (kept before identities were) is never trusted by its times.
    assert status(f(ctime=0), f(ctime=0, sha=None)) == [("changed", False)]


def test_links_devices_and_special_files_are_compared_as_what_they_are():
    assert status(other("link", "/usr/bin/python3"), other("link", "/usr/bin/python3")) == [("same", True)]
    assert status(other("link", "python"), other("link", "/etc")) == [("changed", True)]
    assert status(other("device", "char 1:3"), other("device", "char 1:5")) == [("changed", True)]
    for kind in ("fifo", "socket"):
        assert status(other(kind), other(kind)) == [("same", True)]
    assert status(other("dir", empty=True), other("dir", empty=False)) == [("same", True)]  # it got entries
    assert status(f(), other("link", "x")) == [("changed", True)]  # a file replaced by a link
    assert status(None, other("fifo")) == [("added", True)]
    assert status(other("link", "x"), None) == [("missing", True)]


def test_a_directory_with_entries_is_never_added_and_nothing_beyond_a_walk_is_missing():
    assert status(None, other("dir", empty=False)) == []
    assert status(None, other("dir", empty=True)) == [("added", True)]
    assert status(f(), None, covers=lambda p: False) == []
    assert status(f(), None, covers=lambda p: True) == [("missing", True)]


def test_reconcile_adopts_links_and_special_files_and_holds_what_the_plan_changes_or_an_older_file():
    recorded = {"old.txt": f(mtime=50), "touched.txt": f()}
    actual = {
        "venv/bin/python": other("link", "/usr/bin/python3"),
        "pipe": other("fifo"),
        "old.txt": f(mtime=40, ctime=30, sha=B),
        "touched.txt": f(ctime=30, sha=B),
        "report.md": f(),
    }
    steps = [wd.PlannedStep(4, "file_write", {"path": "report.md", "content": "x"})]
    verdicts = {v.path: (v.action, v.reason) for v in wd.reconcile_plan(wd.compare(recorded, actual), steps)}
    assert verdicts == {
        "venv/bin/python": ("adopt", "added"),
        "pipe": ("adopt", "added"),
        "old.txt": ("hold", "older"),
        "touched.txt": ("adopt", "changed"),
        "report.md": ("hold", "plan_changes"),
    }


def test_a_decision_explains_every_kind_it_names():
    diffs = wd.compare({}, {"link": other("link", "t"), "pipe": other("fifo"), "x": f()})
    assert [d.path for d in wd.differing(diffs, explained={"link", "pipe"})] == ["x"]
