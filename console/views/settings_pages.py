"""The settings pages: sign-in locks, export roots, tool and agent settings (admins change, others read)."""

from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseNotAllowed
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from console.views.agent_settings import SettingsForm, section_context
from console.views.refusals import render_page
from recovery.modes import profile_update
from recovery.selectors import profile_history
from tasks import accounts, export_roots
from tasks.authz import can_admin
from tasks.errors import Invalid, NotFound, ServiceError
from tasks.models import Agent
from tasks.selectors import primary_membership


def settings_admin(request, what: str = "Tool settings"):
    """The membership whose settings the person edits; PermissionDenied (the styled refusal) otherwise."""
    membership = primary_membership(request.user)
    if membership is None:
        raise PermissionDenied(f"{what} belong to an organization, and you are not a member of one.")
    if not can_admin(request.user, membership.org_id):
        raise PermissionDenied(f"{what} need the admin role; you are {membership.role} in {membership.org.name}.")
    return membership


@login_required
@require_safe
def settings_signin(request):
    """The organization's members whose sign-in is locked after wrong passwords, each with Unlock (admin)."""
    membership = settings_admin(request, "Sign-in locks")
    notes = [str(m) for m in messages.get_messages(request)]
    return render_page(
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
    membership = settings_admin(request, "Sign-in locks")
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


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def settings_exports(request):
    """The organization's export roots (admin): where its tasks may export, with Add and Remove."""
    membership = settings_admin(request, "Export roots")
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
    return render_page(
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
    membership = settings_admin(request, "Export roots")
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
            sections.append(section_context(agent, history.get(agent.name, []), opened=opened))
    return render_page(
        request,
        "console/settings_tools.html",
        {"sections": sections, "nav": "settings", "overridden": sum(1 for s in sections if s["overrides"])},
        status=status,
    )


@login_required
@require_safe
def settings_tools(request):
    membership = settings_admin(request)
    focus = request.GET.get("agent", "")
    notes = " ".join(str(m) for m in messages.get_messages(request))
    section = None
    if notes and focus:
        agent = Agent.objects.filter(org_id=membership.org_id, name=focus).select_related("profile").first()
        if agent is not None:
            history = profile_history(membership.org_id, [agent.name]).get(agent.name, [])
            section = (agent.pk, section_context(agent, history, opened=True, saved_text=notes))
    return _settings_page(request, membership, focus=focus, section=section)


def _agent_section(request, membership, agent, *, form=None, saved_text="", error=None, status=200):
    """One agent's section (htmx swaps only it), or the whole page around it for a plain form post."""
    history = profile_history(membership.org_id, [agent.name]).get(agent.name, [])
    ctx = section_context(agent, history, form=form, opened=True, saved_text=saved_text, error=error)
    if not request.htmx:
        return _settings_page(request, membership, focus=agent.name, section=(agent.pk, ctx), status=status)
    return render(request, "console/settings_tools.html#profile", {"s": ctx}, status=status)


@login_required
def settings_agent(request, agent: str):
    """GET: the agent's section as saved (htmx "discard changes"). POST: save what its form changed."""
    membership = settings_admin(request)
    target = Agent.objects.filter(org_id=membership.org_id, name=agent).select_related("profile").first()
    if target is None:
        raise Http404("No such agent.")
    if request.method == "GET":
        if not request.htmx:
            return redirect(f"{reverse('settings-tools')}?{urlencode({'agent': target.name})}#profile-{target.pk}")
        return _agent_section(request, membership, target)
    if request.method != "POST":
        return HttpResponseNotAllowed(["GET", "POST"])
    form = SettingsForm.parse(request.POST)
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
