"""Signing in and out, changing a password: Django's auth views, with what the console adds.

- Sign-in is throttled by django-axes (settings: AXES_*); a locked-out person sees the console's own sign-in
  page saying so (`lockout`), with status 429. An organization's admins unlock members on Settings → Sign-in
  locks (`console.views.settings_pages.settings_signin`); `manage.py axes_reset_username <name>` works from a shell.
- Signing out and changing a password end sessions: `tasks.accounts.session_ended` tells every web process,
  whose relay re-checks that person's live sockets at once and closes those whose session is gone (4401).
"""

from datetime import timedelta

from axes.helpers import get_cool_off, get_failure_limit
from django.conf import settings
from django.contrib import auth
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import AuthenticationForm
from django.shortcuts import redirect, render
from django.urls import reverse_lazy
from django.views.decorators.http import require_POST

from recovery.words.signin import lockout_text
from tasks.accounts import session_ended
from tasks.selectors import primary_membership


class LoginView(auth_views.LoginView):
    template_name = "registration/login.html"
    redirect_authenticated_user = True


def lockout(request, original_response=None, credentials=None):
    """`AXES_LOCKOUT_CALLABLE`: the sign-in page again, saying that signing in is locked and what lifts it."""
    cool_off = get_cool_off(request)
    minutes = int(cool_off.total_seconds() // 60) if isinstance(cool_off, timedelta) else None
    text = lockout_text(failures=get_failure_limit(request, credentials), cooloff_minutes=minutes)
    username = (credentials or {}).get("username", "") if isinstance(credentials, dict) else ""
    form = AuthenticationForm(request, initial={"username": username})
    context = {"form": form, "lockout": text, "next": request.POST.get("next", "") if request.method == "POST" else ""}
    return render(request, "registration/login.html", context, status=429)


@require_POST
def logout(request):
    """Sign out (POST, CSRF-checked): the session is deleted, then that session's live sockets close."""
    user = request.user if request.user.is_authenticated else None
    auth.logout(request)
    if user is not None:
        session_ended(user=user, reason="signed_out")
    return redirect(settings.LOGOUT_REDIRECT_URL)


class PasswordChangeView(auth_views.PasswordChangeView):
    """Every other session of the person ends at once. This one stays signed in under a new key (Django cycles
    it), so its sockets, opened under the old key, close too; a reload makes them live again."""

    template_name = "registration/password_change_form.html"
    success_url = reverse_lazy("password_change_done")

    def get_context_data(self, **kwargs):
        return {**super().get_context_data(**kwargs), "membership": primary_membership(self.request.user)}

    def form_valid(self, form):
        response = super().form_valid(form)
        session_ended(user=form.user, reason="password_changed")
        return response


password_change = login_required(PasswordChangeView.as_view())


@login_required
def password_change_done(request):
    return render(request, "registration/password_change_done.html", {"membership": primary_membership(request.user)})
