"""Rate limits on what people write: follow-up messages and decision notes (429 `throttled`).

DRF's ScopedRateThrottle (a kept library's limiter) does the counting, per person and scope, in Django's
cache — configured as the database cache (`console_cache`), so every web process counts the same requests;
a per-process memory cache would let N processes allow N times the rate. The console's own forms call
`check()` with the same scope, so a page and the API share one count. Rates: REST_FRAMEWORK's
DEFAULT_THROTTLE_RATES (`CONSOLE_MESSAGE_RATE`, `CONSOLE_NOTE_RATE`).
"""

import math
from types import SimpleNamespace

from rest_framework.throttling import ScopedRateThrottle

from tasks.errors import Throttled

MESSAGES = "messages"
NOTES = "notes"
WHAT = {MESSAGES: "follow-up messages", NOTES: "decisions with notes"}


class BodyThrottle(ScopedRateThrottle):
    """A scope's rate for signed-in people (workers and anonymous requests are not counted here)."""

    def allow_request(self, request, view):
        if not getattr(request.user, "is_authenticated", False):
            return True
        return super().allow_request(request, view)


def check(request, scope: str) -> None:
    """Count one write of `scope` for the requesting person; `Throttled` (429) when over the rate."""
    throttle = BodyThrottle()
    if not throttle.allow_request(request, SimpleNamespace(throttle_scope=scope)):
        raise throttled(throttle, scope)


def throttled(throttle, scope: str) -> Throttled:
    wait = max(1, math.ceil(throttle.wait() or 1))
    limit, seconds = throttle.num_requests, throttle.duration
    return Throttled(
        f"Too many {WHAT.get(scope, scope)}: at most {limit} in {seconds} s per person. "
        f"Nothing was saved; try again in {wait} s.",
        retry_after=wait,
    )
