"""Sign-in and limits in words (SECURITY.md): the pages for a request the console cannot answer, lockouts."""

# The console's pages for a request it cannot answer: (title, reason, what to do).
PROBLEMS = {
    404: (
        "Page not found",
        "There is no page at this address.",
        "It may have been mistyped, or what it showed is in another organization or private to someone else.",
    ),
    400: (
        "This request could not be read",
        "The address or the form it sent is malformed, so nothing was done.",
        "Nothing was changed. Go back and try again from the page; a link copied whole usually works.",
    ),
}


def lockout_text(*, failures: int, cooloff_minutes: int | None) -> str:
    """The sign-in page after too many failed attempts (django-axes). It says what happened and what lifts it."""
    wait = (
        f"Try again in {cooloff_minutes} minute{'s' if cooloff_minutes != 1 else ''}, or ask"
        if cooloff_minutes
        else "Ask"
    )
    return (
        f"Signing in is locked for this account from this address after {failures} failed attempts. "
        f"{wait} an admin of your organization to unlock it now."
    )
