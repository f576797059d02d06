"""Recovery limits per organization (DESIGN §14): the breaker's threshold, window and cool-off, and the decision
deadline. Each is a nullable field of the Organization (null = the deployment's default, read from the
environment: CONSOLE_BREAKER_TASKS, _WINDOW_SECONDS, _COOLOFF_SECONDS, CONSOLE_DECISION_DEADLINE_SECONDS), so a page
that has its organization loaded reads them with no query. `limits_of` is the one read; `org_limits_set` the one
write (an admin, one transaction, one `org_recovery_settings_changed` event with before and after).
"""

import os
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction

from recovery.words.limits import limit_invalid_text
from tasks.authz import require_role
from tasks.errors import Invalid
from tasks.events import event_append
from tasks.models import Organization, Role

# field: (lowest, highest) accepted, in tasks or seconds.
BOUNDS: dict[str, tuple[int, int]] = {
    "breaker_tasks": (1, 10000),
    "breaker_window_seconds": (60, 86400),
    "breaker_cooloff_seconds": (60, 86400),
    "decision_deadline_seconds": (60, 30 * 86400),
}
FIELDS = tuple(BOUNDS)


@dataclass(frozen=True)
class Limits:
    breaker_tasks: int
    breaker_window_seconds: int
    breaker_cooloff_seconds: int
    decision_deadline_seconds: int


def _setting(name: str, default: int) -> int:
    """A Django setting if set (tests set them), else the environment, else `default`."""
    value = getattr(settings, name, None)
    if value is None:
        value = os.environ.get(name) or default
    return int(float(value))


def defaults() -> Limits:
    """The deployment's defaults, read at each use, so a changed setting applies at once."""
    return Limits(
        breaker_tasks=_setting("CONSOLE_BREAKER_TASKS", 10),
        breaker_window_seconds=_setting("CONSOLE_BREAKER_WINDOW_SECONDS", 600),
        breaker_cooloff_seconds=_setting("CONSOLE_BREAKER_COOLOFF_SECONDS", 900),
        decision_deadline_seconds=_setting("CONSOLE_DECISION_DEADLINE_SECONDS", 4 * 3600),
    )


def limits_of(org: Organization | None) -> Limits:
    """The limits in force for `org` (an Organization already loaded): its own where set, else the defaults.
    None gives the defaults."""
    base = defaults()
    if org is None:
        return base
    return Limits(**{f: getattr(org, f) if getattr(org, f) is not None else getattr(base, f) for f in FIELDS})


def limits_for(org_id: int) -> Limits:
    """`limits_of` for an organization not loaded yet (one query)."""
    return limits_of(Organization.objects.filter(pk=org_id).only("pk", *FIELDS).first())


def deadline_overrides() -> dict[int, int]:
    """{organization id: its own decision deadline} for the organizations that set one."""
    return dict(
        Organization.objects.filter(decision_deadline_seconds__isnull=False).values_list(
            "pk", "decision_deadline_seconds"
        )
    )


def parse(values: dict) -> dict[str, int | None]:
    """The form's text per field: blank is None (the default), else a whole number within its bounds. Invalid names
    the first field that is not."""
    out: dict[str, int | None] = {}
    for field, (low, high) in BOUNDS.items():
        raw = str(values.get(field) or "").strip()
        if not raw:
            out[field] = None
            continue
        try:
            n = int(raw)
        except ValueError:
            raise Invalid(limit_invalid_text(field, low, high), field=field) from None
        if not low <= n <= high:
            raise Invalid(limit_invalid_text(field, low, high), field=field)
        out[field] = n
    return out


@transaction.atomic
def org_limits_set(*, user, org_id: int, values: dict[str, int | None]) -> Organization:
    """An admin sets the organization's limits (None = the default). NotFound outside it, Forbidden below admin,
    Invalid outside the bounds. No event when nothing changed."""
    require_role(user, org_id, Role.ADMIN, what="No such organization.")
    for field, value in values.items():
        low, high = BOUNDS[field]  # a KeyError is a programming error
        if value is not None and not low <= value <= high:
            raise Invalid(limit_invalid_text(field, low, high), field=field)
    org = Organization.objects.select_for_update().get(pk=org_id)
    before = {f: getattr(org, f) for f in FIELDS}
    after = {**before, **values}
    if after == before:
        return org
    Organization.objects.filter(pk=org_id).update(**after)
    event_append(
        org_id=org_id,
        kind="org_recovery_settings_changed",
        actor=user,
        payload={"before": before, "after": after},
    )
    org.refresh_from_db()
    return org
