"""The command-line contract: scripts set a deployment up with these commands."""

from io import StringIO

import pytest
from django.contrib.auth import authenticate
from django.core.management import CommandError, call_command

from tasks.models import Agent, Membership, Organization


def run(*args) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_create_org_twice_creates_it_once(db):
    run("create_org", "acme", "--name", "Acme Corp")
    run("create_org", "acme", "--name", "Something Else")
    org = Organization.objects.get()
    assert (org.slug, org.name) == ("acme", "Acme Corp")


def signin():
    """The sign-in request authenticate() is called with (django-axes counts attempts per request)."""
    from django.test import RequestFactory

    return RequestFactory().post("/accounts/login/")


def test_add_member_creates_the_user_sets_the_role_and_the_password_works(db):
    run("create_org", "acme")
    run("add_member", "acme", "mia", "--role", "viewer", "--password", "correct horse 42")
    user = authenticate(signin(), username="mia", password="correct horse 42")
    assert user is not None and user.username == "mia"
    assert authenticate(signin(), username="mia", password="wrong") is None
    assert Membership.objects.get(user=user).role == "viewer"

    run("add_member", "acme", "mia", "--role", "admin")
    assert list(Membership.objects.filter(user=user).values_list("role", flat=True)) == ["admin"]
    assert authenticate(signin(), username="mia", password="correct horse 42") is not None


def test_add_member_to_an_unknown_organization_fails(db):
    with pytest.raises(CommandError):
        run("add_member", "nowhere", "mia", "--role", "viewer")


def test_add_agent_creates_an_agent_with_a_profile(db):
    run("create_org", "acme")
    run("add_agent", "acme", "scout")
    run("add_agent", "acme", "careful", "--no-auto-resume")
    agents = {a.name: a for a in Agent.objects.filter(org__slug="acme").select_related("profile")}
    assert set(agents) == {"scout", "careful"}
    assert agents["scout"].profile.auto_resume is True
    assert agents["careful"].profile.auto_resume is False


def single_token(out: str) -> str:
    lines = out.splitlines()
    assert len(lines) == 1, out
    token = lines[0]
    assert token and token == token.strip() and " " not in token
    return token


def test_issue_token_for_a_person_prints_one_working_token(db, make_token_client):
    run("create_org", "acme")
    run("add_member", "acme", "mia", "--role", "operator")
    out, err = run("issue_token", "mia")
    token = single_token(out)
    assert err == ""
    assert make_token_client(token).get("/api/tasks/").status_code == 200


def test_issue_token_for_a_worker_prints_one_working_token(db, make_token_client):
    run("create_org", "acme")
    out, err = run("issue_token", "--worker", "w", "--org", "acme")
    token = single_token(out)
    assert err == ""
    r = make_token_client(token).post("/api/runner/claim/", {"worker": "w-1"}, format="json")
    assert r.status_code == 204


def test_issue_token_for_an_unknown_user_prints_nothing_and_fails(db):
    out = StringIO()
    with pytest.raises(CommandError):
        call_command("issue_token", "nobody", stdout=out)
    assert out.getvalue() == ""


def test_revoke_token_ends_a_token_at_once(db, client):
    from tests.factories import make_member, make_org, user_token, worker_token

    org = make_org("acme")
    user = make_member(org, "mia", "operator")
    key, other = user_token(user), user_token(user)
    worker_key = worker_token(org, "w1")
    headers = {"HTTP_AUTHORIZATION": f"Token {key}"}
    assert client.get("/api/tasks/", **headers).status_code == 200
    out = StringIO()
    call_command("revoke_token", "--key", key, stdout=out)
    assert out.getvalue().strip() == "revoked 1 token"
    r = client.get("/api/tasks/", **headers)
    assert r.status_code == 401 and r.json()["code"] == "not_authenticated"
    assert client.get("/api/tasks/", HTTP_AUTHORIZATION=f"Token {other}").status_code == 200  # only that one
    call_command("revoke_token", "mia", stdout=out)
    assert client.get("/api/tasks/", HTTP_AUTHORIZATION=f"Token {other}").status_code == 401
    call_command("revoke_token", "--worker", "w1", "--org", "acme", stdout=out)
    r = client.post("/api/runner/claim/", {}, content_type="application/json", HTTP_AUTHORIZATION=f"Token {worker_key}")
    assert r.status_code == 401
    with pytest.raises(CommandError, match="No token has that key"):
        call_command("revoke_token", "--key", key, stdout=out)
