"""The board's filter (DESIGN §12): the states, ages and sorts a filter may name, parsed from a page's parameters."""

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from datetime import timedelta

from recovery.models import ActionStatus
from tasks.errors import Invalid

# The states a filter may name: the API's vocabulary, plus `active` (the board's Running tab: running or stopping).
STATES = (
    "all",
    "needs_decision",
    "exhausted",
    "blocked",
    "running",
    "active",
    "stopping",
    "queued",
    "idle",
    "follow_through",
    "done",
    "cancelled",
)
# "Waiting longer than": the moment a task's wait began is its oldest open or exhausted recovery action's
# opening, or else its last change.
AGES = {"1h": timedelta(hours=1), "4h": timedelta(hours=4), "1d": timedelta(days=1), "1w": timedelta(weeks=1)}
SORTS = ("recent", "urgency")
WAITING = (ActionStatus.OPEN, ActionStatus.EXHAUSTED)
OPTIONS_SAMPLE = 500
CLOSED = ("done", "cancelled")
MAX_Q = 200


def text_ok(value: str) -> bool:
    """Text a database can store: no NUL byte, no lone surrogate."""
    if "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@dataclass(frozen=True)
class BoardFilter:
    """What the board lists: a state, a search, an agent, a recovery owner, a tool, an age; and its order."""

    state: str = "all"
    q: str = ""
    agent: str = ""
    owner: str = ""
    tool: str = ""
    age: str = ""
    sort: str = "recent"

    @classmethod
    def parse(cls, data: Mapping, *, strict: bool = False) -> "BoardFilter":
        """From query parameters or an API body. `strict` refuses a bad value (API); otherwise it is dropped."""
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise Invalid("`filter` must be an object.", field="filter")
        values = {}
        limits = {"q": MAX_Q, "agent": 100, "owner": 150, "tool": 100}
        for f in fields(cls):
            raw = data.get(f.name)
            if raw in (None, ""):
                continue
            if not isinstance(raw, str) or not text_ok(raw):
                if strict:
                    raise Invalid(f"`{f.name}` must be a string.", field=f.name)
                continue
            value = raw.strip()
            ok = {
                "state": value in STATES,
                "age": value in AGES,
                "sort": value in SORTS,
            }.get(f.name, len(value) <= limits.get(f.name, 0))
            if not ok:
                if strict:
                    raise Invalid(f"`{f.name}` is not a value the board knows.", field=f.name)
                continue
            values[f.name] = value
        return cls(**values)

    def params(self) -> dict:
        """The non-default values, as query parameters (saved views, links, the bulk form)."""
        default = BoardFilter()
        return {
            f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) != getattr(default, f.name)
        }

    @property
    def narrowed(self) -> bool:
        """Anything beyond the state: a new task may not belong to such a list."""
        return bool(self.q or self.agent or self.owner or self.tool or self.age)

    def with_sort(self, sort: str) -> "BoardFilter":
        return replace(self, sort=sort)


# The board's tabs, by the key its URL carries; the Running tab lists running and stopping.
BOARD_TABS = ("needs_decision", "exhausted", "blocked", "running", "follow_through", "all")
BOARD_PARAMS = ("state", "q", "agent", "owner", "tool", "age", "sort")


def board_filter(params: Mapping) -> tuple[str, BoardFilter]:
    """(the tab, the filter it lists) from the board's URL parameters; unknown values are dropped."""
    tab = params.get("state") or "all"
    if tab not in BOARD_TABS:
        tab = "all"
    values = {k: params.get(k) for k in BOARD_PARAMS if k != "state"}
    return tab, BoardFilter.parse({**values, "state": "active" if tab == "running" else tab})


def page_params(tab: str, f: BoardFilter) -> dict:
    """The board's URL parameters for this tab and filter (the tab's key, not the filter's state)."""
    params = {k: v for k, v in f.params().items() if k != "state"}
    return {"state": tab, **params} if tab != "all" else params
