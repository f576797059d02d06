"""Tool recovery modes: the defaults and their resolution for an agent profile.

This lives in `tasks` because a step's mode is resolved and stored when the
step is planned (an execution-time fact); `recovery` edits the overrides.

A step's mode: the admin's override on the agent's profile, else the mode the
agent's worker registered in its catalogue, else the built-in default below,
else forget. The tool `model` (a model turn) is reserved: always replay.
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

# The reference worker's tools: what "the tool is no longer available" is judged against for an agent
# whose worker registered no catalogue.
BUILTIN_TOOLS = frozenset(
    {
        "file_read", "list_files", "file_write", "file_edit", "bash", "fetch", "http_post", "sleep", "todo_add",
        "todo_done", "memory_store", "memory_update", "memory_delete", "task_create", "subagent", "foreach",
    }
)  # fmt: skip

# A model turn: args {"model", "digest", "request"?}, result the response. Calling the model again has no
# effect outside, so a turn cut off mid-call is called again; it is never in a catalogue nor overridden.
MODEL = "model"
RESERVED_TOOLS = frozenset({MODEL})
# Features of scripted plans only: an agent run may not plan these (their steps are numbered by the plan).
PLAN_ONLY_TOOLS = frozenset({"subagent", "foreach"})


def default_mode(tool: str, catalogue: dict | None = None) -> str:
    """The mode a tool has without an admin's override: registered, else built in, else forget."""
    if tool == MODEL:
        return REPLAY
    entry = (catalogue or {}).get(tool)
    if isinstance(entry, dict) and entry.get("mode") in RecoveryMode.values:
        return entry["mode"]
    return DEFAULT_MODES.get(tool, FORGET)


def mode_for(tool: str, overrides: dict | None = None, catalogue: dict | None = None) -> str:
    """The profile's override if valid, else the registered mode, else the built-in default, else forget."""
    if tool == MODEL:
        return REPLAY
    if overrides:
        override = overrides.get(tool)
        if override in RecoveryMode.values:
            return override
    return default_mode(tool, catalogue)


def profile_mode(tool: str, profile) -> str:
    """`mode_for` with an AgentProfile (or None)."""
    if profile is None:
        return mode_for(tool)
    return mode_for(tool, profile.tool_modes, profile.tool_catalogue)


def known_tools(catalogue: dict | None) -> frozenset[str]:
    """The tools an agent has now: its registered catalogue (and model turns) if it has one, else the built-ins."""
    if catalogue is None:
        return BUILTIN_TOOLS | RESERVED_TOOLS
    return frozenset(catalogue) | RESERVED_TOOLS
