"""What a recovery action's card holds: its badge, tone, title, cause, progress and controls (`ActionView`)."""

from dataclasses import dataclass, field

from recovery.words.lines import At, Line, plain


@dataclass
class ActionView:
    badge: str
    tone: str
    title: str
    cause: str
    progress: list[Line] = field(default_factory=list)
    decision: Line | None = None
    gate: Line | None = None
    next: Line | None = None
    closed: Line | None = None
    attempts: str | None = None
    due: At | None = None
    controls: frozenset = frozenset()
    # What each repair control will do, restated in its confirmation (workspace actions).
    confirm: dict = field(default_factory=dict)
    # The repair task and its return owner (workspace actions).
    repair_task: Line | None = None
    files: list = field(default_factory=list)
    # The latest repair's files, each with what was done and its hashes before and after.
    result_rows: list = field(default_factory=list)

    @property
    def next_text(self) -> str:
        return plain(self.next)
