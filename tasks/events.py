"""The one way an Event is written."""

from django.db import connection

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


def event_append(
    *, org_id: int, kind: str, actor, task_id: int | None = None, run_id: int | None = None, payload: dict | None = None
) -> Event:
    """Append one event. Call it inside the transaction of the change it records.

    On PostgreSQL it also NOTIFYs the web processes' relays; the notification
    is delivered on commit and only wakes them early (they poll regardless).
    """
    event = Event.objects.create(
        org_id=org_id, task_id=task_id, run_id=run_id, kind=kind, actor=actor_name(actor), payload=payload or {}
    )
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("NOTIFY console_events")
    return event
