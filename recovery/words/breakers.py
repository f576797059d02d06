"""The recovery breaker (DESIGN §14): its states, a held run's line, who closed it; recovery.rules.breaker composes
the breaker's own sentence."""

from recovery.words.lines import Line

BREAKER_STATES = {"open": "Open", "half_open": "Half-open: one trial continuation", "closed": "Closed"}


def breaker_held_line(run_id: int, breaker_id: int) -> Line:
    """A run the breaker holds: it is not continued automatically until the breaker closes."""
    return (
        f"Run #{run_id} waits: recovery breaker #{breaker_id} paused automatic recovery of this agent. The "
        "supervisor continues it on its first pass after the breaker closes (an admin closes it with a reason; "
        "after its cool-off one trial continuation may close it).",
    )


def breaker_closed_text(breaker) -> str:
    """Who closed a breaker and why, from its saved row."""
    if breaker.state != "closed":
        return ""
    return f"Closed by {breaker.closed_by}: {breaker.reason}"


def breaker_tasks_text(n: int) -> str:
    return "No task it counted is visible to you." if n == 0 else f"{n:,} task{'s' if n != 1 else ''} it counted"


def breaker_notice_title(agent: str, signature: str) -> str:
    """A breaker-opened notice's title (it names no task): whose automatic recovery paused, and on what failure."""
    return f"Automatic recovery paused for {agent or 'an agent'}: {signature or 'the same failure'}"
