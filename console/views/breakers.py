"""Recovery breaker pages (DESIGN §14): the list, one breaker with the tasks it counted, an admin's close.

Thin: read through recovery.selectors, close through recovery.actions.breakers (which checks the admin role
server-side), render or redirect. The header's warning on every page (console/alerts.py) links here.
"""

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from console.views.refusals import refused
from recovery import selectors
from recovery.actions import breakers
from recovery.words.breakers import BREAKER_STATES, breaker_closed_text, breaker_tasks_text
from tasks.authz import can_admin
from tasks.errors import Forbidden, Invalid, NotFound, ServiceError

TASKS_SHOWN = 200


def _entry(b, user) -> dict:
    return {
        "breaker": b,
        "sentence": selectors.breaker_facts(b, b.agent.name).sentence(),
        "state_text": BREAKER_STATES[b.state],
        "closed_text": breaker_closed_text(b),
        "can_close": b.state != "closed" and can_admin(user, b.org_id),
    }


@login_required
def breaker_list(request):
    entries = [_entry(b, request.user) for b in selectors.breakers_recent(request.user)]
    return render(request, "console/breakers.html", {"entries": entries, "nav": "breakers"})


def _detail(request, breaker_id: int, *, error: str = "", reason: str = "", status: int = 200):
    try:
        b = selectors.breaker_visible(request.user, breaker_id)
    except NotFound as exc:
        raise Http404(exc.detail) from exc
    tasks = list(selectors.breaker_tasks(b, request.user)[:TASKS_SHOWN])
    ctx = {
        **_entry(b, request.user),
        "tasks": tasks,
        "tasks_text": breaker_tasks_text(len(tasks)),
        "error": error,
        "reason": reason,
        "nav": "breakers",
    }
    return render(request, "console/breaker.html", ctx, status=status)


@login_required
def breaker_detail(request, breaker_id: int):
    return _detail(request, breaker_id)


@login_required
@require_POST
def breaker_close(request, breaker_id: int):
    reason = request.POST.get("reason", "")
    try:
        breakers.breaker_close(user=request.user, breaker_id=breaker_id, reason=reason)
    except NotFound as exc:
        raise Http404(exc.detail) from exc
    except Forbidden as exc:
        return refused(request, exc.detail)
    except (Invalid, ServiceError) as exc:
        # A missing reason, or a breaker closed meanwhile: the page again, saying why, with what was typed.
        return _detail(
            request,
            breaker_id,
            error=exc.detail,
            reason=reason[: breakers.REASON_MAX],
            status=409 if not isinstance(exc, Invalid) else 400,
        )
    return redirect("breaker", breaker_id=breaker_id)
