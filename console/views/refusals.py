"""The console's pages for a request it refuses or cannot answer (403, 404, 400, a missing CSRF token), and
`render_page`, through which every page gets the person's membership for its header."""

from django.core.exceptions import DisallowedHost
from django.shortcuts import render
from django.urls import Resolver404
from django.utils.http import url_has_allowed_host_and_scheme

from recovery.words.signin import PROBLEMS
from tasks.errors import not_found as api_not_found
from tasks.selectors import org_admin_names, primary_membership


def render_page(request, template, context, status=200):
    context.setdefault("membership", primary_membership(request.user))
    return render(request, template, context, status=status)


def refused(request, reason: str, *, status: int = 403):
    """The console's page for a refused request: the reason, who can help, and a way back."""
    membership = primary_membership(request.user)
    back = _back(request)
    return render_page(
        request,
        "console/refused.html",
        {
            "reason": reason,
            "back": back,
            "admins": org_admin_names(membership.org_id) if membership else [],
            "membership": membership,
        },
        status=status,
    )


def _back(request) -> str:
    """The page the person came from, when it is another page of this console."""
    back = request.META.get("HTTP_REFERER", "")
    try:
        if back == request.build_absolute_uri() or not url_has_allowed_host_and_scheme(
            back, allowed_hosts={request.get_host()}, require_https=request.is_secure()
        ):
            return ""
    except DisallowedHost:  # the 400 of a request whose Host header this console does not serve
        return ""
    return back


def problem(request, *, status: int, title: str, reason: str, hint: str = ""):
    """The console's page for a request it cannot answer (404, 400): what happened, in words, and ways on."""
    user = getattr(request, "user", None)
    membership = primary_membership(user) if user is not None and user.is_authenticated else None
    context = {"status": status, "title": title, "reason": reason, "hint": hint, "back": _back(request)}
    # A card's control swaps the answer into the card: it gets the words, not a second page inside the first.
    template = "console/problem.html" + ("#problem" if request.headers.get("HX-Request") == "true" else "")
    return render(request, template, {**context, "membership": membership}, status=status)


def not_found(request, exception=None):
    """`handler404`: the styled page with navigation (under /api/ the API's error shape). A view's own sentence
    ("No task #12.") is kept; the resolver's is not (it lists the URL patterns)."""

    if request.path.startswith("/api/"):
        return api_not_found(request, exception)
    said = exception.args[0] if exception is not None and exception.args else ""
    own = isinstance(said, str) and said and not isinstance(exception, Resolver404)
    title, reason, hint = PROBLEMS[404]
    return problem(request, status=404, title=title, reason=said if own else reason, hint=hint)


def bad_request(request, exception=None, *, reason: str = ""):
    """`handler400`, and every malformed request a page refuses: what could not be read, never "not allowed"."""
    title, default, hint = PROBLEMS[400]
    return problem(request, status=400, title=title, reason=reason or default, hint=hint)


def forbidden(request, exception=None):
    """`handler403`: every PermissionDenied a page raises is the styled refusal with its reason."""
    reason = str(exception) if exception is not None and str(exception) else "You do not have access to this page."
    return refused(request, reason)


def csrf_failure(request, reason: str = ""):
    """`CSRF_FAILURE_VIEW`: a form sent without its security token, said in words."""
    return refused(
        request,
        "This form was sent without a valid security token — the page may have been open since before you "
        "signed in again, or cookies are blocked. Reload the page and try again.",
    )
