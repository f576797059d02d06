"""Pages and card actions. Thin: parse, authorize, call one service, render."""

from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import DisallowedHost, PermissionDenied
from django.http import Http404, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect, render
from django.urls import Resolver404, reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from console import agent_settings, cards
from recovery.actions import commands as recovery_actions
from recovery.actions import controls, followups
from recovery.actions.start_over import task_start_over as start_over
from recovery.models import RecoveryAction
from recovery.modes import profile_update
from recovery.selectors import action_detail, profile_history, task_detail
from recovery.words.signin import PROBLEMS
from recovery.words.workspaces import file_status, path_text, side_text
from recovery.workspaces import repairs
from recovery.workspaces import validation as workspaces
from tasks import accounts, export_roots, services, throttles
from tasks.authz import can_admin
from tasks.errors import Forbidden, Invalid, NotFound, ServiceError
from tasks.errors import not_found as api_not_found
from tasks.events import last_event_id
from tasks.models import Agent, Task
from tasks.selectors import org_admin_names, primary_membership, visible_runs, visible_tasks
from tasks.workspace import wire

TABS = (
    ("needs_decision", "Needs decision"),
    ("exhausted", "Exhausted"),
    ("blocked", "Blocked"),
    ("running", "Running"),
    ("follow_through", "Needs follow-through"),
    ("all", "All"),
)


def _page(request, template, context, status=200):
    context.setdefault("membership", primary_membership(request.user))
    return render(request, template, context, status=status)


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
    parts = cards.task_page_parts(task_id, user=request.user, request=request)
    return _page(
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
    task_runs = cards.task_runs_of(run.task_id)
    run = task_runs[run.pk]
    run.task = Task.objects.get(pk=run.task_id)
    ctx = cards.run_context(run, task_runs, request.user)
    return _page(
        request,
        "console/run.html",
        {
            "run": run,
            "run_html": cards.render_run_card(run, task_runs, user=request.user, request=request, conversation=True),
            "conversation_html": cards.render_conversation(run, task_runs, request=request),
            "repair_html": cards.render_run_repair(run, user=request.user, request=request),
            **cards.run_page_context(run, ctx),
            "nav": "board",
            "ws_path": f"/ws/runs/{run.pk}/?after={cursor}",
            "last_event": cursor,
        },
    )


# --- card actions ------------------------------------------------------------------


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
    html = cards.render_action_card(
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
    return _page(request, "console/held.html", {"task": task, "copy": copy, "files": files, "nav": "board"})


def _header_response(request, task_id: int, *, error: ServiceError | None = None, typed=None):
    task = _task_or_404(request, task_id)
    if not request.htmx and isinstance(error, Forbidden):
        return refused(request, error.detail)
    if not request.htmx and error is None:
        return redirect(f"/tasks/{task_id}/")
    html = cards.render_task_header(
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
    html = cards.render_composer(
        task,
        user=request.user,
        request=request,
        message=error.detail if error else "",
        body=request.POST.get("body", "") if error else "",
    )
    if error is None:
        # The new message shows at once; the live push brings the same list to other tabs.
        html += cards.render_messages(task, user=request.user, request=request, oob=True)
    return HttpResponse(html, status=error.status_code if error else 200)


# --- settings ----------------------------------------------------------------------


def _settings_admin(request, what: str = "Tool settings"):
    """The membership whose settings the person edits; PermissionDenied (the styled refusal) otherwise."""
    membership = primary_membership(request.user)
    if membership is None:
        raise PermissionDenied(f"{what} belong to an organization, and you are not a member of one.")
    if not can_admin(request.user, membership.org_id):
        raise PermissionDenied(f"{what} need the admin role; you are {membership.role} in {membership.org.name}.")
    return membership


# --- sign-in locks -----------------------------------------------------------------------------


@login_required
@require_safe
def settings_signin(request):
    """The organization's members whose sign-in is locked after wrong passwords, each with Unlock (admin)."""
    membership = _settings_admin(request, "Sign-in locks")
    notes = [str(m) for m in messages.get_messages(request)]
    return _page(
        request,
        "console/settings_signin.html",
        {
            "locks": accounts.signin_locks(membership.org_id),
            "org": membership.org,
            "failures": settings.AXES_FAILURE_LIMIT,
            "cooloff_minutes": int(settings.AXES_COOLOFF_TIME.total_seconds() // 60),
            "notes": notes,
            "nav": "settings",
        },
    )


@login_required
@require_POST
def settings_signin_unlock(request):
    membership = _settings_admin(request, "Sign-in locks")
    username = request.POST.get("username", "")
    try:
        locked = accounts.signin_unlock(actor=request.user, org_id=membership.org_id, username=username)
    except NotFound:
        raise Http404("No such member.") from None
    if locked:
        messages.success(request, f"Unlocked {username}: they can sign in again now.")
    else:
        messages.info(request, f"{username} was not locked (the lock may have lifted by itself).")
    return redirect("settings-signin")


# --- export roots ------------------------------------------------------------------------------


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def settings_exports(request):
    """The organization's export roots (admin): where its tasks may export, with Add and Remove."""
    membership = _settings_admin(request, "Export roots")
    context = {"form_path": "", "form_reason": "", "error": ""}
    status = 200
    if request.method == "POST":
        path, reason = request.POST.get("path", "").strip(), request.POST.get("reason", "").strip()
        try:
            root = export_roots.export_root_add(actor=request.user, org_id=membership.org_id, path=path, reason=reason)
        except Invalid as exc:
            # Kept as typed, with the refusal beside it.
            context.update(form_path=path, form_reason=reason, error=exc.detail)
            status = 400
        else:
            messages.success(request, f"Added {root.path}: tasks may now export under it.")
            return redirect("settings-exports")
    return _page(
        request,
        "console/settings_exports.html",
        {
            **context,
            "roots": export_roots.export_roots(membership.org_id),
            "area": export_roots.export_area(),
            "org": membership.org,
            "notes": [str(m) for m in messages.get_messages(request)],
            "nav": "settings",
        },
        status=status,
    )


@login_required
@require_POST
def settings_exports_remove(request, root_id: int):
    membership = _settings_admin(request, "Export roots")
    try:
        path = export_roots.export_root_remove(actor=request.user, org_id=membership.org_id, root_id=root_id)
    except NotFound:
        raise Http404("No such export root.") from None
    messages.success(request, f"Removed {path}: no task exports under it from now on.")
    return redirect("settings-exports")


def _settings_page(request, membership, *, focus: str = "", section=None, status: int = 200):
    """The whole page; `section` (agent pk, context) replaces that agent's section as drawn from saved state."""
    agents = list(Agent.objects.filter(org_id=membership.org_id).select_related("profile").order_by("name"))
    history = profile_history(membership.org_id)
    sections = []
    for agent in agents:
        if section is not None and section[0] == agent.pk:
            sections.append(section[1])
        else:
            opened = agent.name == focus or len(agents) == 1
            sections.append(agent_settings.section_context(agent, history.get(agent.name, []), opened=opened))
    return _page(
        request,
        "console/settings_tools.html",
        {"sections": sections, "nav": "settings", "overridden": sum(1 for s in sections if s["overrides"])},
        status=status,
    )


@login_required
@require_safe
def settings_tools(request):
    membership = _settings_admin(request)
    focus = request.GET.get("agent", "")
    notes = " ".join(str(m) for m in messages.get_messages(request))
    section = None
    if notes and focus:
        agent = Agent.objects.filter(org_id=membership.org_id, name=focus).select_related("profile").first()
        if agent is not None:
            history = profile_history(membership.org_id, [agent.name]).get(agent.name, [])
            section = (agent.pk, agent_settings.section_context(agent, history, opened=True, saved_text=notes))
    return _settings_page(request, membership, focus=focus, section=section)


def _agent_section(request, membership, agent, *, form=None, saved_text="", error=None, status=200):
    """One agent's section (htmx swaps only it), or the whole page around it for a plain form post."""
    history = profile_history(membership.org_id, [agent.name]).get(agent.name, [])
    ctx = agent_settings.section_context(agent, history, form=form, opened=True, saved_text=saved_text, error=error)
    if not request.htmx:
        return _settings_page(request, membership, focus=agent.name, section=(agent.pk, ctx), status=status)
    return render(request, "console/settings_tools.html#profile", {"s": ctx}, status=status)


@login_required
def settings_agent(request, agent: str):
    """GET: the agent's section as saved (htmx "discard changes"). POST: save what its form changed."""
    membership = _settings_admin(request)
    target = Agent.objects.filter(org_id=membership.org_id, name=agent).select_related("profile").first()
    if target is None:
        raise Http404("No such agent.")
    if request.method == "GET":
        if not request.htmx:
            return redirect(f"{reverse('settings-tools')}?{urlencode({'agent': target.name})}#profile-{target.pk}")
        return _agent_section(request, membership, target)
    if request.method != "POST":
        return HttpResponseNotAllowed(["GET", "POST"])
    form = agent_settings.SettingsForm.parse(request.POST)
    try:
        saved = profile_update(
            actor=request.user, profile=target.profile, **form.service_args(target.profile.tool_catalogue)
        )
    except ServiceError as exc:
        return _agent_section(request, membership, target, form=form, error=exc, status=exc.status_code)
    text = (
        f"Saved {target.name}: {saved.text}."
        if saved.changes
        else f"Nothing to save: {target.name}'s settings are as shown."
    )
    target.profile = saved.profile
    if not request.htmx:
        messages.success(request, text)
        return redirect(f"{reverse('settings-tools')}?{urlencode({'agent': target.name})}#profile-{target.pk}")
    rest = form.without_reset() if form.reset else None
    return _agent_section(request, membership, target, form=rest, saved_text=text)


# --- refusals ----------------------------------------------------------------------


def refused(request, reason: str, *, status: int = 403):
    """The console's page for a refused request: the reason, who can help, and a way back."""
    membership = primary_membership(request.user)
    back = _back(request)
    return _page(
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
