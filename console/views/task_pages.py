"""The task page, the run page, and the POST handlers of their cards and header controls.

Thin: parse, authorize, call one service, render."""

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from console.cards.actions import render_action_card, run_repair_context
from console.cards.runs import conversation_context, run_card_context, run_context, run_page_context, task_runs_of
from console.cards.task import render_composer, render_messages, render_task_header, task_page_parts
from console.views.refusals import refused, render_page
from recovery.actions import commands as recovery_actions
from recovery.actions import controls, followups
from recovery.actions.start_over import task_start_over as start_over
from recovery.models import RecoveryAction
from recovery.selectors import action_detail, task_detail
from recovery.words.workspaces import file_status, path_text, side_text
from recovery.workspaces import repairs
from recovery.workspaces import validation as workspaces
from tasks import services, throttles
from tasks.errors import Forbidden, Invalid, NotFound, ServiceError
from tasks.events import last_event_id
from tasks.models import Task
from tasks.selectors import visible_runs, visible_tasks
from tasks.workspace import wire


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _task_or_404(request, task_id: int):
    try:
        return task_detail(request.user, task_id)
    except NotFound as exc:
        raise Http404(str(exc)) from exc


@login_required
def task_view(request, task_id: int):
    if not visible_tasks(request.user).filter(pk=task_id).exists():
        raise Http404(f"There is no task #{task_id} that you can see.")
    recovery_actions.actions_retire_stale(task_id=task_id)
    cursor = last_event_id()  # before reading state: a later change is then always resent
    parts = task_page_parts(task_id, user=request.user, request=request)
    return render_page(
        request,
        "console/task.html",
        {**parts, "nav": "board", "ws_path": f"/ws/tasks/{task_id}/?after={cursor}", "last_event": cursor},
    )


@login_required
def run_view(request, agent: str, run_id: int):
    run = visible_runs(request.user).filter(pk=run_id, agent__name=agent).select_related("task", "agent").first()
    if run is None:
        raise Http404(f"There is no run #{run_id} that you can see.")
    cursor = last_event_id()
    task_runs = task_runs_of(run.task_id)
    run = task_runs[run.pk]
    run.task = Task.objects.get(pk=run.task_id)
    ctx = run_context(run, task_runs, request.user)
    return render_page(
        request,
        "console/run.html",
        {
            "run": run,
            # Each card's fragment context: the page renders them ({% fragment %}) as a push does (render_*).
            "cards": {
                "run": run_card_context(ctx, conversation=True),
                # An agent run's conversation; a scripted run's page lists its steps on its card.
                "conversation": conversation_context(run, task_runs) if run.kind == "agent" else None,
                "repair": run_repair_context(run, user=request.user, request=request),
            },
            **run_page_context(run, ctx, task_runs),
            "nav": "board",
            "ws_path": f"/ws/runs/{run.pk}/?after={cursor}",
            "last_event": cursor,
        },
    )


def _action_or_404(request, action_id: int) -> RecoveryAction:
    action = action_detail(request.user, action_id)
    if action is None:
        raise Http404("No such action.")
    return action


def _card_response(request, action_id: int, *, error: ServiceError | None = None):
    action = _action_or_404(request, action_id)
    if not request.htmx and isinstance(error, Forbidden):
        return refused(request, error.detail)
    if not request.htmx and error is None:
        return redirect(f"/tasks/{action.task_id}/#action-{action.pk}")
    html = render_action_card(
        action,
        user=request.user,
        request=request,
        message=error.detail if error else "",
        message_code=error.code if error else "",
        typed=_typed(request, ("note", "reason", "accept_duplicate_risk")) if error else None,
    )
    return HttpResponse(html, status=error.status_code if error else 200)


def _version(request) -> int | None:
    return _int(request.POST.get("version"))


def _checked(request, name: str) -> bool:
    return request.POST.get(name) in ("1", "on", "true")


def _typed(request, names) -> dict:
    """What the person typed, handed back when the server refuses a form: nothing typed is lost."""
    return {n: request.POST.get(n, "") for n in names if request.POST.get(n) not in (None, "")}


@login_required
@require_POST
def action_retry(request, action_id: int):
    _action_or_404(request, action_id)
    try:
        recovery_actions.action_retry(
            action_id=action_id,
            user=request.user,
            version=_version(request),
            accept_duplicate_risk=_checked(request, "accept_duplicate_risk"),
            reason=request.POST.get("reason", ""),
        )
    except ServiceError as exc:
        return _card_response(request, action_id, error=exc)
    return _card_response(request, action_id)


@login_required
@require_POST
def action_decide(request, action_id: int):
    _action_or_404(request, action_id)
    try:
        if request.POST.get("note", "").strip():
            throttles.check(request, throttles.NOTES)
        recovery_actions.action_decide(
            action_id=action_id,
            user=request.user,
            version=_version(request),
            outcome=request.POST.get("outcome", ""),
            note=request.POST.get("note", ""),
            accept_duplicate_risk=_checked(request, "accept_duplicate_risk"),
        )
    except ServiceError as exc:
        return _card_response(request, action_id, error=exc)
    return _card_response(request, action_id)


@login_required
@require_POST
def action_cancel(request, action_id: int):
    _action_or_404(request, action_id)
    try:
        recovery_actions.action_cancel(action_id=action_id, user=request.user, version=_version(request))
    except ServiceError as exc:
        return _card_response(request, action_id, error=exc)
    return _card_response(request, action_id)


@login_required
@require_POST
def action_repair(request, action_id: int):
    """An admin's confirmed repair: the card comes back with its actual result (or the refusal, inside it)."""
    _action_or_404(request, action_id)
    try:
        repairs.action_repair(
            action_id=action_id,
            user=request.user,
            version=_version(request),
            repair=request.POST.get("repair", ""),
            run=_int(request.POST.get("run")),
        )
    except ServiceError as exc:
        return _card_response(request, action_id, error=exc)
    return _card_response(request, action_id)


@login_required
@require_POST
def action_repair_task(request, action_id: int):
    _action_or_404(request, action_id)
    try:
        repairs.action_repair_task(
            action_id=action_id,
            user=request.user,
            agent=request.POST.get("agent", ""),
            title=request.POST.get("title", ""),
            return_owner=request.POST.get("return_owner", ""),
        )
    except ServiceError as exc:
        return _card_response(request, action_id, error=exc)
    return _card_response(request, action_id)


@login_required
def task_workspace(request, task_id: int):
    """A held copy of a task's workspace, listed file by file (linked from the workspace panel)."""
    task = _visible_task(request, task_id)
    held = _int(request.GET.get("held"))
    copy = workspaces.HeldCopy.objects.filter(task=task, pk=held).first() if held else None
    if copy is None:
        return redirect(f"/tasks/{task_id}/#workspace-{task_id}")
    files = [
        {
            "row": f,
            "path": path_text(wire(f.path)),
            "status_text": file_status(f.status),
            "note": side_text(f.actual),
        }
        for f in workspaces.held_listing(copy)
    ]
    return render_page(request, "console/held.html", {"task": task, "copy": copy, "files": files, "nav": "board"})


def _header_response(request, task_id: int, *, error: ServiceError | None = None, typed=None):
    task = _task_or_404(request, task_id)
    if not request.htmx and isinstance(error, Forbidden):
        return refused(request, error.detail)
    if not request.htmx and error is None:
        return redirect(f"/tasks/{task_id}/")
    html = render_task_header(
        task, user=request.user, request=request, message=error.detail if error else "", typed=typed if error else None
    )
    return HttpResponse(html, status=error.status_code if error else 200)


def _visible_task(request, task_id: int) -> Task:
    task = visible_tasks(request.user).filter(pk=task_id).first()
    if task is None:
        raise Http404(f"There is no task #{task_id} that you can see.")
    return task


def _task_header_action(call, fields=()):
    """A header control: one service call (which authorizes the user), then the re-rendered header.

    A refusal comes back inside the header with what was typed.
    """

    @login_required
    @require_POST
    def view(request, task_id: int):
        task = _visible_task(request, task_id)
        error = None
        try:
            call(request, task)
        except ServiceError as exc:
            error = exc
        return _header_response(request, task_id, error=error, typed=_typed(request, fields))

    return view


def _limit(value: str):
    value = (value or "").strip()
    if not value:
        return None
    if not value.isdigit() or len(value) > 19:
        raise Invalid("The budget limit must be a whole number (or empty for no limit).", field="limit")
    return int(value)


def _task_id(value: str) -> int:
    value = (value or "").strip().lstrip("#")
    if not value.isdigit() or len(value) > 18:
        raise Invalid("Give a task number, like 42.", field="add")
    return int(value)


task_pause = _task_header_action(lambda r, t: services.task_pause(actor=r.user, task=t))
task_resume = _task_header_action(lambda r, t: services.task_resume(actor=r.user, task=t))


def _continue(request, task):
    done = controls.task_continue(user=request.user, task_id=task.pk)
    if done.run is None:
        raise done.refusal()


task_continue = _task_header_action(_continue)
# Follow-ups a closing left undelivered, offered again on the reopened task (through normal admission).
task_messages_deliver = _task_header_action(lambda r, t: followups.messages_deliver(user=r.user, task_id=t.pk))
# Start over: a fresh run from the beginning that reuses nothing (recovery.actions.start_over).
task_start_over = _task_header_action(
    lambda r, t: start_over(task_id=t.pk, user=r.user, accept_duplicate_risk=_checked(r, "accept_duplicate_risk")),
    fields=("accept_duplicate_risk",),
)
task_owner = _task_header_action(
    lambda r, t: controls.task_reassign(
        user=r.user, task_id=t.pk, agent=r.POST.get("agent", ""), reason=r.POST.get("owner_reason", "")
    ),
    ("owner_reason",),
)
task_close = _task_header_action(
    lambda r, t: controls.task_close(
        user=r.user, task_id=t.pk, resolution=r.POST.get("resolution", ""), reason=r.POST.get("reason", "")
    ),
    ("reason",),
)
task_reopen = _task_header_action(
    lambda r, t: controls.task_reopen(user=r.user, task_id=t.pk, reason=r.POST.get("reason", "")), ("reason",)
)
task_budget = _task_header_action(
    lambda r, t: controls.task_budget(
        user=r.user, task_id=t.pk, limit=_limit(r.POST.get("limit", "")), reason=r.POST.get("budget_reason", "")
    ),
    ("limit", "budget_reason"),
)


def _dependencies(request, task):
    remove = request.POST.get("remove")
    if remove:
        return controls.task_dependencies(user=request.user, task_id=task.pk, remove=[_task_id(remove)])
    return controls.task_dependencies(user=request.user, task_id=task.pk, add=[_task_id(request.POST.get("add"))])


task_dependencies = _task_header_action(_dependencies, ("add",))


@login_required
@require_POST
def run_stop(request, run_id: int):
    run = visible_runs(request.user).filter(pk=run_id).first()
    if run is None:
        raise Http404(f"There is no run #{run_id} that you can see.")
    error = None
    try:
        services.run_request_stop(actor=request.user, run=run)
    except ServiceError as exc:
        error = exc
    return _header_response(request, run.task_id, error=error)


@login_required
@require_POST
def task_message(request, task_id: int):
    task = _task_or_404(request, task_id)
    error = None
    try:
        throttles.check(request, throttles.MESSAGES)
        followups.message_save(user=request.user, task=task, body=request.POST.get("body", ""))
    except ServiceError as exc:
        error = exc
    if not request.htmx and isinstance(error, Forbidden):
        return refused(request, error.detail)
    if not request.htmx and error is None:
        return redirect(f"/tasks/{task_id}/")
    task = _task_or_404(request, task_id)
    html = render_composer(
        task,
        user=request.user,
        request=request,
        message=error.detail if error else "",
        body=request.POST.get("body", "") if error else "",
    )
    if error is None:
        # The new message shows at once; the live push brings the same list to other tabs.
        html += render_messages(task, user=request.user, request=request, oob=True)
    return HttpResponse(html, status=error.status_code if error else 200)
