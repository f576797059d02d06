"""The board and the inbox, built for triage (DESIGN §12): filters, urgency, saved views, the inbox count.

Thin: parse the board's parameters, read through recovery.triage, render. The
same `board_filter()` reads the page's URL, its websocket's URL and the bulk
form, so a push, a reload and a bulk preview all mean the same tasks.
"""

from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.functional import SimpleLazyObject
from django.views.decorators.http import require_POST

from console.cards.task import task_row_context
from console.views.refusals import bad_request, refused
from recovery import notify
from recovery.rules.bulk import ACTIONS
from recovery.triage.board import FilterOptions, board_count, board_page, board_queryset, filter_options
from recovery.triage.filters import BOARD_PARAMS, board_filter, page_params
from recovery.triage.inbox import INBOX_LIMIT, inbox_actions, inbox_count
from recovery.triage.saved_views import saved_views
from recovery.triage.saved_views import view_delete as delete_saved_view
from recovery.triage.saved_views import view_save as save_view
from recovery.words.bulk import AGE_NAMES, BULK_ACTIONS, SORT_NAMES, owner_option
from recovery.words.notifications import OVERDUE_BADGE, overdue_text
from recovery.words.vocabulary import TASK_STATES, cause, owner
from tasks.authz import can_operate
from tasks.errors import Forbidden, ServiceError
from tasks.events import last_event_id
from tasks.selectors import primary_membership

TABS = (
    ("needs_decision", "Needs decision"),
    ("exhausted", "Exhausted"),
    ("blocked", "Blocked"),
    ("running", "Running"),
    ("follow_through", "Needs follow-through"),
    ("all", "All"),
)

COUNT_CAP = 10_000
PARAMS = BOARD_PARAMS


def _url(params: dict) -> str:
    return reverse("board") + ("?" + urlencode(params) if params else "")


def nav_counts(request):
    """Context processor: the inbox count in the navigation (one query, only on pages that draw the navigation)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"inbox_count": SimpleLazyObject(lambda: inbox_count(user))}


def render_nav_count(user, *, oob: bool = True) -> str:
    return render_to_string(
        "console/nav_count.html#count", {"inbox_count": inbox_count(user), "oob": oob, "user": user}
    )


def board_context(request, params, *, typed=None) -> dict:
    """Everything the board draws for these parameters (the page, and a board re-drawn around a refused preview)."""
    user = request.user
    tab, f = board_filter(params)
    cursor = params.get("cursor") or None
    last_event = last_event_id()
    matching = board_queryset(user, f)  # built once: the page and its count filter the same tasks
    tasks, next_cursor = board_page(user, f, cursor=cursor, limit=50, matching=matching)
    total = board_count(user, f, cap=COUNT_CAP, matching=matching)
    membership = primary_membership(user)
    selectable = bool(membership and can_operate(user, membership.org_id))
    typed = typed or {}
    checked = {int(i) for i in typed.get("ids", []) if str(i).isdigit()}
    rows = [{**task_row_context(t, user), "selectable": selectable, "checked": t.pk in checked} for t in tasks]
    here = page_params(tab, f)
    views = []
    current_view = None
    if membership is not None:
        for v in saved_views(user, membership.org_id):
            vtab, vf = board_filter(v.params)
            current = page_params(vtab, vf) == here
            views.append({"view": v, "url": _url(page_params(vtab, vf)), "current": current})
            if current:
                current_view = v
    options = filter_options(user, membership.org_id) if membership else FilterOptions([], [], [])
    # A chosen value nothing waits on any more stays chosen (and listed), so Apply keeps it.
    owners = sorted({*options.owners, *([f.owner] if f.owner else [])})
    tools = sorted({*options.tools, *([f.tool] if f.tool else [])})
    counted = f"{COUNT_CAP:,}+" if total > COUNT_CAP else f"{total:,}"
    return {
        "rows": rows,
        "tab": tab,
        "f": f,
        "q": f.q,
        "tabs": [(key, label, _url(page_params(key, f))) for key, label in TABS],
        "next_url": _url({**here, "cursor": next_cursor}) if next_cursor else "",
        "count_text": f"{counted} task{'s' if total != 1 else ''}",
        "matching_text": counted,
        "total": total,
        "nav": "board",
        "ws_path": "/ws/board/?" + urlencode({**here, "after": last_event}),
        "last_event": last_event,
        "selectable": selectable,
        "params": here,
        "search_params": {k: v for k, v in here.items() if k != "q"},
        "views": views,
        "current_view": current_view,
        "options": {
            "agents": options.agents,
            "owners": [(o, owner_option(o)) for o in owners],
            "tools": tools,
            "ages": list(AGE_NAMES.items()),
            "sorts": list(SORT_NAMES.items()),
        },
        "bulk_actions": [(a, BULK_ACTIONS[a]) for a in ACTIONS],
        "outcomes": [
            ("performed", "It happened"),
            ("not_performed", "It did not happen"),
            ("unresolved", "Unresolved"),
            ("agent_verifies", "The agent verifies (agent runs)"),
        ],
        "typed": typed,
        "membership": membership,
        "filtered": bool(here),
    }


@login_required
def board(request):
    try:
        ctx = board_context(request, request.GET)
    except ServiceError as exc:
        return bad_request(request, reason=exc.detail)
    return render(request, "console/board.html", ctx)


def render_board_refusal(request, params, error: ServiceError, typed: dict):
    """The board again, with the bulk form's refusal inside it and what the person chose and typed."""
    ctx = board_context(request, params, typed=typed)
    ctx["bulk_error"] = error.detail
    return render(request, "console/board.html", ctx, status=error.status_code)


def inbox_context(user) -> dict:
    actions = inbox_actions(user)
    items = [
        {
            "action": a,
            "overdue": notify.is_overdue(a, deadline=notify.deadline_seconds(a.org)),
            "overdue_text": overdue_text(notify.deadline_seconds(a.org)),
            "badge": TASK_STATES["exhausted" if a.status == "exhausted" else "needs_decision"],
            "cause_text": cause(a.cause),
            "owner": owner(a.recovery_owner) or "operators",
        }
        for a in actions
    ]
    return {"items": items, "inbox_total": len(items), "inbox_limit": INBOX_LIMIT, "overdue_badge": OVERDUE_BADGE}


def render_inbox_list(user, *, oob: bool = False) -> str:
    return render_to_string("console/inbox.html#list", {**inbox_context(user), "oob": oob, "user": user})


@login_required
def inbox(request):
    last_event = last_event_id()
    return render(
        request,
        "console/inbox.html",
        {
            **inbox_context(request.user),
            "nav": "inbox",
            "membership": primary_membership(request.user),
            "ws_path": "/ws/inbox/?" + urlencode({"after": last_event}),
            "last_event": last_event,
        },
    )


# --- saved views ---------------------------------------------------------------------------


@login_required
@require_POST
def view_save(request):
    membership = primary_membership(request.user)
    if membership is None:
        raise Http404("No organization.")
    params = {k: request.POST.get(k, "") for k in PARAMS}
    tab, f = board_filter(params)
    try:
        view = save_view(
            user=request.user, org_id=membership.org_id, name=request.POST.get("name", ""), params=page_params(tab, f)
        )
    except ServiceError as exc:
        if isinstance(exc, Forbidden):
            return refused(request, exc.detail)
        ctx = board_context(request, page_params(tab, f))
        ctx["view_error"] = exc.detail
        ctx["typed"] = {"name": request.POST.get("name", "")}
        return render(request, "console/board.html", ctx, status=exc.status_code)
    vtab, vf = board_filter(view.params)
    return redirect(_url(page_params(vtab, vf)))


@login_required
@require_POST
def view_delete(request, view_id: int):
    try:
        delete_saved_view(user=request.user, view_id=view_id)
    except ServiceError as exc:
        raise Http404(exc.detail) from exc
    return redirect(reverse("board"))
