"""The one way an Event is written, and the listeners called with each one in its transaction."""

from collections.abc import Callable

from django.db.models import Max

from tasks.event_kinds import registered
from tasks.models import Event


def actor_name(actor) -> str:
    """People by username, workers as `worker:<name>`, processes by their label."""
    if actor is None:
        return "system"
    if isinstance(actor, str):
        return actor
    from tasks.models import Worker

    if isinstance(actor, Worker):
        return f"worker:{actor.name}"
    return getattr(actor, "username", None) or str(actor)


# Called with every appended Event, inside its transaction. `tasks` may not import `recovery`, so recovery registers
# its listener here when its app is ready (recovery/apps.py): the notification outbox (recovery/notify.py) writes
# its delivery rows in the transaction of the event they tell of. A listener must cost nothing for kinds it ignores.
_appended: list[Callable[[Event], None]] = []


def on_appended(listener: Callable[[Event], None]) -> None:
    if listener not in _appended:
        _appended.append(listener)


def last_event_id() -> int:
    """The newest Event's id (0 before the first): a page drawn after reading it is pushed every later change."""
    return Event.objects.aggregate(m=Max("id"))["m"] or 0


def event_append(
    *, org_id: int, kind: str, actor, task_id: int | None = None, run_id: int | None = None, payload: dict | None = None
) -> Event:
    """Append one event. Call it inside the transaction of the change it records.

    On PostgreSQL the insert also wakes the web processes' relays: a trigger
    NOTIFYs (migration tasks 0009), which PostgreSQL delivers once per
    transaction, on commit. It only wakes them early; they poll regardless.
    """
    event = Event.objects.create(
        org_id=org_id,
        task_id=task_id,
        run_id=run_id,
        kind=registered(kind),
        actor=actor_name(actor),
        payload=payload or {},
    )
    for listener in _appended:
        listener(event)
    return event
