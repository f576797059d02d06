"""The recovery limits settings page (admin): the organization's breaker threshold, window and cool-off, and its
decision deadline; blank keeps the deployment's default."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from console.views.settings_pages import settings_admin
from recovery import limits
from recovery.words.limits import LIMIT_FIELDS, limit_default_text, limits_saved_text
from tasks.errors import Invalid

WHAT = "Recovery limits"


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def settings_recovery(request):
    """GET: the organization's limits. POST: save them (blank = the default); a value out of bounds is shown with
    what was typed, nothing saved."""
    membership = settings_admin(request, WHAT)
    org = membership.org
    typed = {f: "" if getattr(org, f) is None else str(getattr(org, f)) for f in limits.FIELDS}
    error, error_field, status = "", "", 200
    if request.method == "POST":
        typed = {f: request.POST.get(f, "").strip()[:20] for f in limits.FIELDS}
        try:
            values = limits.parse(typed)
            before = {f: getattr(org, f) for f in limits.FIELDS}
            limits.org_limits_set(user=request.user, org_id=org.pk, values=values)
        except Invalid as exc:
            error, error_field, status = exc.detail, exc.extra.get("field", ""), exc.status_code
        else:
            messages.success(request, limits_saved_text(values != before))
            return redirect("settings-recovery")
    base = limits.defaults()
    fields = []
    for f in limits.FIELDS:
        label, unit, help_text = LIMIT_FIELDS[f]
        low, high = limits.BOUNDS[f]
        fields.append(
            {
                "name": f,
                "label": label,
                "unit": unit,
                "help": help_text,
                "default": limit_default_text(f, getattr(base, f)),
                "min": low,
                "max": high,
                "value": typed[f],
                "invalid": f == error_field,
            }
        )
    return render(
        request,
        "console/settings_recovery.html",
        {
            "org": org,
            "membership": membership,
            "nav": "settings",
            "notes": [str(m) for m in messages.get_messages(request)],
            "fields": fields,
            "error": error,
        },
        status=status,
    )
