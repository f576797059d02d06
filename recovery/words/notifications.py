"""Notifications and decision deadlines (DESIGN §14): what a notice, a destination and a delivery say, and the
overdue mark (a deadline decides nothing)."""

NOTICE_NAMES = {
    "decision_waiting": "A decision is waiting",
    "exhausted": "Recovery used up its attempts",
    "repair_waiting": "A workspace repair waits for an admin",
    "breaker_opened": "Automatic recovery was paused (a breaker opened)",
    "deadline_passed": "A decision waited past its deadline",
}
DESTINATION_KINDS = {"webhook": "Signed webhook", "apprise": "Apprise (chat, mail)"}
DELIVERY_STATUSES = {
    "pending": "Waiting to be sent",
    "delivered": "Delivered",
    "failed": "Failed; it will be tried again",
    "given_up": "Given up",
}
OVERDUE_BADGE = "overdue"


def seconds_text(seconds: int) -> str:
    """A whole span in its largest unit: "4 hours", "90 minutes", "1 day"."""
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            n = seconds // size
            return f"{n} {unit}{'s' if n != 1 else ''}"
    return f"{seconds} second{'s' if seconds != 1 else ''}"


def overdue_text(deadline_seconds: int) -> str:
    """What the overdue badge means; the deadline decides nothing."""
    return f"Waiting longer than the {seconds_text(deadline_seconds)} deadline; it still waits for a person."


def notice_message(notice: str, *, task_id, title: str, url: str) -> tuple[str, str]:
    """A chat or mail notice (Apprise): its title and body."""
    head = NOTICE_NAMES.get(notice, notice)
    what = f"task #{task_id} “{title}”" if task_id else f"“{title}”"
    return f"Recovery console: {head.lower()}", f"{head}: {what}. {url}"


def destination_state(destination) -> str:
    """A destination's line on the settings page: on, off, or failing (and why)."""
    if destination.failing_since is not None:
        n = destination.failures
        error = f" The last error: {destination.last_error}" if destination.last_error else ""
        return (
            f"Failing: {n} deliver{'ies' if n != 1 else 'y'} in a row were given up, so it gets no new notices "
            f"until an admin turns it on again.{error}"
        )
    if not destination.enabled:
        return "Off: it gets no new notices."
    if destination.failures:
        return f"On; the last {destination.failures} given up. The last error: {destination.last_error}"
    return "On."


def delivery_try_text(attempt: dict) -> str:
    """One try of a delivery: the HTTP status it got, or the error that stopped it."""
    status = attempt.get("status")
    if attempt.get("error"):
        return f"HTTP {status}: {attempt['error']}" if status else attempt["error"]
    return f"HTTP {status}" if status else "Sent"


def deadline_rule_text(deadline_seconds: int) -> str:
    """The settings page's line on the organization's decision deadline (it decides nothing)."""
    return (
        f"A decision waiting longer than {seconds_text(deadline_seconds)} is marked overdue and noticed once; "
        "it still waits for a person (Recovery limits sets the deadline)."
    )
