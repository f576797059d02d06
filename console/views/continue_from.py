"""Continue from step k in the browser: the preview page and its form (recovery.actions.continue_from).

Thin: parse, authorize (the service checks the operator role), call one service, render. A refusal comes back on
the preview page with the reason, visibly, and what was typed.
"""

import json

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from console.cards.continue_from import continue_from_offer
from recovery.actions.continue_from import continue_from_preview, task_continue_from
from recovery.words.continue_from import continue_from_preview_lines, step_span
from tasks.authz import can_operate
from tasks.errors import Forbidden, NotFound, ServiceError
from tasks.models import Run
from tasks.selectors import org_admin_names, primary_membership, visible_tasks


def _seq(value) -> int | None:
    value = (value or "").strip()
    if not value.lstrip("-").isdigit() or len(value) > 18:
        return None
    return int(value)


def _refused(request, reason: str):
    membership = primary_membership(request.user)
    context = {
        "reason": reason,
        "back": "",
        "admins": org_admin_names(membership.org_id) if membership else [],
        "membership": membership,
    }
    return render(request, "console/refused.html", context, status=403)


@login_required
@require_http_methods(["GET", "POST"])
def task_continue_from_page(request, task_id: int):
    """GET `?seq=k`: the preview (what is reused, what runs again, which calls may act outside, with their
    arguments). POST `seq`, `accept_duplicate_risk`, `reason`: queue the run, then back to the task page."""
    task = visible_tasks(request.user).filter(pk=task_id).first()
    if task is None:
        raise Http404(f"There is no task #{task_id} that you can see.")
    data = request.POST if request.method == "POST" else request.GET
    raw = data.get("seq")
    seq = _seq(raw)
    typed = {"accept_duplicate_risk": data.get("accept_duplicate_risk") == "1", "reason": data.get("reason", "")}
    error: ServiceError | None = None
    if request.method == "POST":
        try:
            if seq is None:
                raise ServiceError("Choose the step to continue from (a whole number).", field="seq")
            task_continue_from(
                task_id=task_id,
                user=request.user,
                seq=seq,
                accept_duplicate_risk=typed["accept_duplicate_risk"],
                reason=typed["reason"],
            )
        except Forbidden as exc:
            return _refused(request, exc.detail)
        except NotFound as exc:
            raise Http404(exc.detail) from exc
        except ServiceError as exc:
            error = exc
        else:
            return redirect(f"/tasks/{task_id}/")
    preview = None
    if seq is not None:
        try:
            preview = continue_from_preview(task_id=task_id, user=request.user, seq=seq)
        except Forbidden as exc:
            return _refused(request, exc.detail)
        except ServiceError as exc:
            error = error or exc
    elif raw is not None and error is None:
        error = ServiceError("Choose the step to continue from (a whole number).", field="seq")
    latest = Run.objects.filter(task_id=task_id).order_by("-id").first()
    operate = can_operate(request.user, task.org_id)
    offer = None if preview is not None else continue_from_offer(task, latest, operate=operate)
    if offer is None and preview is None and error is None:
        # Nothing to pick (a viewer, a live run, a closed task): the service says why, read-only.
        try:
            continue_from_preview(task_id=task_id, user=request.user, seq=1)
        except Forbidden as exc:
            return _refused(request, exc.detail)
        except ServiceError as exc:
            error = exc
    context = {
        "task": task,
        "preview": preview,
        "words": continue_from_preview_lines(preview, task_status=task.status) if preview is not None else None,
        "steps": [
            {**s, "args_text": json.dumps(s["args"], sort_keys=True, ensure_ascii=False)}
            for s in (preview.runs_again if preview is not None else [])
        ],
        "consent_steps": step_span([s["seq"] for s in preview.side_effects]) if preview else "",
        "continue_from": offer,
        "message": error.detail if error else "",
        "message_code": error.code if error else "",
        "typed": typed,
        "membership": primary_membership(request.user),
        "nav": "board",
    }
    return render(request, "console/continue_from.html", context, status=error.status_code if error else 200)
