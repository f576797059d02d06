"""Loaded by the server processes of tests/browser/test_workers_anywhere.py (PYTHONPATH): every open, listing,
write or rename of a path under CONSOLE_TEST_FORBIDDEN_ROOT (the worker's workspaces) is logged to
CONSOLE_TEST_FORBIDDEN_LOG, through Python's audit hooks (sys.addaudithook): the test asserts the log stays empty."""

import os
import sys

_ROOT = os.environ.get("CONSOLE_TEST_FORBIDDEN_ROOT")
_LOG = os.environ.get("CONSOLE_TEST_FORBIDDEN_LOG")
EVENTS = {
    "open", "os.listdir", "os.scandir", "os.mkdir", "os.rename", "os.remove", "os.rmdir", "os.symlink",
    "os.chmod", "os.utime", "os.truncate", "shutil.copyfile", "shutil.copytree", "shutil.rmtree", "os.link",
}  # fmt: skip

if _ROOT and _LOG:
    _root = os.path.realpath(_ROOT)

    def _hook(event, args):
        if event not in EVENTS or not args:
            return
        path = args[0]
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, str) or not path:
            return
        full = os.path.realpath(path) if os.path.isabs(path) else os.path.realpath(os.path.join(os.getcwd(), path))
        if full == _root or full.startswith(_root + os.sep):
            with open(_LOG, "a") as fh:
                fh.write(f"{os.getpid()} {event} {path}\n")

    sys.addaudithook(_hook)
