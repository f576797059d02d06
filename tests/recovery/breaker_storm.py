"""Tripping a recovery breaker through the engine (no worker process), for page, live and browser tests."""

from recovery.models import RecoveryBreaker
from recovery.supervisor.loop import supervise_once
from tests.recovery import engine as e

SAFE3 = [e.SAFE, e.SAFE, e.SAFE]


def trip(org, settings, *, n: int = 4, threshold: int = 2, agent: str = "builder"):
    """`n` tasks of `agent` cut off at step 2 alike, then a supervisor pass: more than `threshold` open the
    breaker. Returns (the breaker, the interrupted runs, oldest first)."""
    settings.CONSOLE_BREAKER_TASKS = threshold
    runs = [e.interrupted(org, SAFE3, 2, agent=agent, title=f"{agent} storm {i}") for i in range(n)]
    supervise_once()
    return RecoveryBreaker.objects.get(agent__name=agent, state="open"), runs
