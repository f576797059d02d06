"""Bulk pages (DESIGN §12): the preview a person confirms, its progress and ledger, the history.

Thin: parse, call one service of recovery.bulk.operations, redirect or render. The
detail page's status card and ledger are the partials its websocket pushes.
"""

from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from console.views.refusals import bad_request, refused
from console.views.triage import PARAMS, board_filter, render_board_refusal
from recovery.bulk import operations as bulk
from recovery.bulk.selectors import PENDING, RESULT_FILTERS, counts_of, expired, history_page, ledger, operation
from recovery.words.bulk import (
    BULK_ACTIONS,
    BULK_RESULTS,
    bulk_counts_text,
    bulk_item_text,
    bulk_line,
    bulk_predicted,
    bulk_reason,
    bulk_risk,
    bulk_selection,
    bulk_status,
    bulk_title,
)
from recovery.words.runs import duration
from tasks.authz import can_operate
from tasks.errors import Forbidden, Invalid, NotFound, ServiceError
from tasks.events import last_event_id
from tasks.selectors import primary_membership

LEDGER_PAGE = 100
RESULT_TABS = (
    ("", "All"),
    ("applied", "Applied"),
    ("skipped", "Skipped"),
    ("failed", "Failed"),
    (PENDING, "Not reached"),
)


def _checked(request, name: str) -> bool:
    return request.POST.get(name) in ("1", "on", "true")


def _op_or_404(request, op_id: int):
    try:
        return operation(request.user, op_id)
    except NotFound as exc:
        raise Http404(exc.detail) from exc


# --- the board's form --------------------------------------------------------------------------


@login_required
@require_POST
def bulk_preview(request):
    """The board's "Preview": freeze what was chosen, then show the preview to confirm (nothing happens yet)."""
    params = {k: request.POST.get(f"filter_{k}", "") for k in PARAMS}
    ids_raw = request.POST.getlist("ids")
    action = request.POST.get("action", "")
    typed = {
        "ids": ids_raw,
        "action": action,
        "outcome": request.POST.get("outcome", ""),
        "note": request.POST.get("note", ""),
        "accept_duplicate_risk": _checked(request, "accept_duplicate_risk"),
        "all_matching": _checked(request, "all_matching"),
    }
    try:
        filter_ = ids = None
        if typed["all_matching"]:
            _, board = board_filter(params)
            filter_ = board.params()
        else:
            if not all(i.isdigit() and len(i) <= 18 for i in ids_raw):
                raise Invalid("The chosen tasks are not valid task numbers.", field="ids")
            ids = [int(i) for i in ids_raw]
            if not ids:
                raise Invalid("Choose at least one task, or select all that match this filter.", field="ids")
        op = bulk.bulk_preview(
            user=request.user,
            action=action,
            ids=ids,
            filter=filter_,
            params={
                "outcome": typed["outcome"] if action == "decide" else None,
                "note": typed["note"],
                "accept_duplicate_risk": typed["accept_duplicate_risk"],
            },
        )
    except ServiceError as exc:
        if isinstance(exc, Forbidden):
            return refused(request, exc.detail)
        return render_board_refusal(request, params, exc, typed)
    return redirect(reverse("bulk-detail", args=[op.pk]), permanent=False)


# --- the operation's page -----------------------------------------------------------------------


def status_context(op, user, counts=None) -> dict:
    counts = counts or counts_of(user, [op.pk])[op.pk]
    is_expired = expired(op)
    badge, tone = bulk_status(op, counts, expired=is_expired)
    operate = can_operate(user, op.org_id)
    mine = op.actor_id == getattr(user, "pk", None)
    return {
        "op": op,
        "counts": counts,
        "badge": badge,
        "tone": tone,
        "line": bulk_line(op, counts, expired=is_expired),
        "counts_text": bulk_counts_text(counts),
        "title": bulk_title(op),
        "risk": bulk_risk(op.action, op.params),
        "can_execute": operate and mine and op.status == "previewed" and not is_expired,
        "can_cancel": operate and op.status in ("previewed", "running"),
        "can_retry_failed": operate and op.status in ("finished", "cancelled") and counts.failed > 0,
        "asks_consent": op.action in ("retry", "decide"),
        "preview_owner": op.actor_name,
        "previewed": op.status == "previewed",
        "expired": is_expired,
    }


def ledger_context(op, user, *, result: str = "", pos=None) -> dict:
    items, more = ledger(user, op, result=result, after=pos, limit=LEDGER_PAGE)
    rows = [
        {
            "item": i,
            "result_text": BULK_RESULTS.get(i.result, i.result),
            "text": bulk_item_text(op.action, op.params, i)
            if i.result
            else (bulk_predicted(i.predicted) if op.status == "previewed" else ""),
        }
        for i in items
    ]
    base = reverse("bulk-detail", args=[op.pk])
    tabs = [(key, label, base + (f"?{urlencode({'result': key})}" if key else "")) for key, label in RESULT_TABS]
    query = {"result": result} if result else {}
    return {
        "op": op,
        "rows": rows,
        "result": result,
        "result_tabs": tabs,
        "next_url": f"{base}?{urlencode({**query, 'pos': more})}" if more is not None else "",
    }


def render_status(op, user, *, request=None, oob: bool = False) -> str:
    return render_to_string(
        "console/bulk_detail.html#status", {**status_context(op, user), "oob": oob}, request=request
    )


def render_ledger(op, user, *, result: str = "", pos=None, request=None, oob: bool = False) -> str:
    ctx = {**ledger_context(op, user, result=result, pos=pos), "oob": oob}
    return render_to_string("console/bulk_detail.html#ledger", ctx, request=request)


def ledger_args(params) -> tuple[str, int | None]:
    result = params.get("result", "")
    if result not in RESULT_FILTERS and result != PENDING:
        result = ""
    pos = params.get("pos")
    return result, (int(pos) if isinstance(pos, str) and pos.isdigit() and len(pos) <= 9 else None)


def refusal_groups(op) -> list[tuple[str, int]]:
    return sorted(((bulk_reason(k), n) for k, n in (op.refusals or {}).items()), key=lambda r: -r[1])


def detail_context(request, op, *, error: str = "") -> dict:
    result, pos = ledger_args(request.GET)
    cursor = last_event_id()  # before reading state: a later change is then always pushed
    query = {"after": cursor, **({"result": result} if result else {}), **({"pos": pos} if pos is not None else {})}
    return {
        **status_context(op, request.user),
        **ledger_context(op, request.user, result=result, pos=pos),
        "nav": "bulk",
        "membership": primary_membership(request.user),
        "refusal_groups": refusal_groups(op),
        "would_apply": op.count - sum((op.refusals or {}).values()),
        "selection_text": bulk_selection(op.selection),
        "ws_path": f"/ws/bulk/{op.pk}/?" + urlencode(query),
        "last_event": cursor,
        "error": error,
    }


@login_required
def bulk_detail(request, op_id: int):
    op = _op_or_404(request, op_id)
    return render(request, "console/bulk_detail.html", detail_context(request, op))


def _after(request, op_id: int, call):
    """One service call from the page's form; its refusal is shown on the page, with the reason."""
    _op_or_404(request, op_id)
    try:
        op = call()
    except ServiceError as exc:
        if isinstance(exc, Forbidden):
            return refused(request, exc.detail)
        op = _op_or_404(request, op_id)
        ctx = detail_context(request, op, error=exc.detail)
        return render(request, "console/bulk_detail.html", ctx, status=exc.status_code)
    return redirect(reverse("bulk-detail", args=[op.pk]))


@login_required
@require_POST
def bulk_execute(request, op_id: int):
    return _after(
        request,
        op_id,
        lambda: bulk.bulk_execute(user=request.user, op_id=op_id, scope_hash=request.POST.get("scope_hash", "")),
    )


@login_required
@require_POST
def bulk_cancel(request, op_id: int):
    return _after(request, op_id, lambda: bulk.bulk_cancel(user=request.user, op_id=op_id))


@login_required
@require_POST
def bulk_retry_failed(request, op_id: int):
    return _after(
        request,
        op_id,
        lambda: bulk.bulk_retry_failed(
            user=request.user, op_id=op_id, accept_duplicate_risk=_checked(request, "accept_duplicate_risk")
        ),
    )


# --- the history ------------------------------------------------------------------------------------


@login_required
def bulk_history(request):
    cursor = request.GET.get("cursor")
    if cursor is not None and not (cursor.isdigit() and len(cursor) <= 18):
        return bad_request(request, reason="That page cursor is not valid.")
    rows, more = history_page(request.user, cursor=cursor, limit=50)
    now = timezone.now()
    entries = []
    for op, counts in rows:
        badge, tone = bulk_status(op, counts, expired=expired(op, now))
        entries.append(
            {
                "op": op,
                "counts": counts,
                "badge": badge,
                "tone": tone,
                "name": BULK_ACTIONS.get(op.action, op.action),
                "took": duration(op.started_at, op.finished_at) if op.finished_at else "",
            }
        )
    return render(
        request,
        "console/bulk_list.html",
        {
            "entries": entries,
            "next_url": f"{reverse('bulk')}?{urlencode({'cursor': more})}" if more else "",
            "nav": "bulk",
            "membership": primary_membership(request.user),
        },
    )
