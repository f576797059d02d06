"""Recovery limits per organization (recovery/limits.py, console/views/limits.py): the settings page's words."""

from recovery.words.notifications import seconds_text

# field: (label, unit, what it does)
LIMIT_FIELDS = {
    "breaker_tasks": (
        "Breaker threshold",
        "tasks",
        "The breaker of an agent and failure opens when more distinct tasks than this failed the same way "
        "within the window.",
    ),
    "breaker_window_seconds": ("Breaker window", "seconds", "How far back the breaker counts failed tasks."),
    "breaker_cooloff_seconds": (
        "Breaker cool-off",
        "seconds",
        "How long an open breaker holds automatic continuations before it lets one trial continuation run.",
    ),
    "decision_deadline_seconds": (
        "Decision deadline",
        "seconds",
        "How long a decision may wait before it is marked overdue and the deadline notice is sent. "
        "It decides nothing: the decision still waits for a person.",
    ),
}


def limit_default_text(field: str, value: int) -> str:
    """Under a limit's field: the deployment's default, used while the field is blank."""
    if field == "breaker_tasks":
        return f"Blank: the deployment's default, {value} task{'s' if value != 1 else ''}."
    return f"Blank: the deployment's default, {seconds_text(value)}."


def limits_saved_text(changed: int) -> str:
    return "Recovery limits saved." if changed else "Nothing changed: the recovery limits are as they were."


def limit_invalid_text(field: str, low: int, high: int) -> str:
    """A limit refused: which, and what it accepts."""
    label, unit, _ = LIMIT_FIELDS[field]
    return f"{label}: a whole number of {unit} from {low} to {high}, or blank for the deployment's default."
