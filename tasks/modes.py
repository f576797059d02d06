"""Tool recovery modes: the defaults and their resolution for an agent profile.

This lives in `tasks` because a step's mode is resolved and stored when the
step is planned (an execution-time fact); `recovery` edits the overrides.
"""

from tasks.models import RecoveryMode

REPLAY, NOTIFY, FORGET = RecoveryMode.REPLAY, RecoveryMode.NOTIFY, RecoveryMode.FORGET

DEFAULT_MODES: dict[str, str] = {
    "file_read": REPLAY,
    "list_files": REPLAY,
    "fetch": REPLAY,
    "sleep": REPLAY,
    "todo_add": REPLAY,
    "todo_done": REPLAY,
    "memory_update": REPLAY,
    "memory_delete": REPLAY,
    "task_delete": REPLAY,
    "file_write": NOTIFY,
    "file_edit": NOTIFY,
    "bash": NOTIFY,
    "http_post": NOTIFY,
    "memory_store": NOTIFY,
    "task_create": NOTIFY,
    "subagent": NOTIFY,
    # A cut-off top-level foreach is judged by its items (each planned with its own
    # tool's mode); this mode counts for a foreach nested in a subagent's plan,
    # which is retried as a whole.
    "foreach": NOTIFY,
}

KNOWN_TOOLS = tuple(DEFAULT_MODES)


def mode_for(tool: str, overrides: dict | None = None) -> str:
    """The profile's override if valid, else the tool's default, else forget."""
    if overrides:
        override = overrides.get(tool)
        if override in RecoveryMode.values:
            return override
    return DEFAULT_MODES.get(tool, FORGET)
