"""GET /api/breakers/ and POST /api/breakers/{id}/close/ (API.md "Power tools"), and the 409 a held task gives."""

import pytest

from recovery.models import RecoveryBreaker
from recovery.supervisor.loop import supervise_once
from tests.factories import make_member, user_token
from tests.recovery import engine as e

SAFE3 = [e.SAFE, e.SAFE, e.SAFE]


@pytest.fixture
def tripped(org, agent, settings):
    settings.CONSOLE_BREAKER_TASKS = 2
    runs = [e.interrupted(org, SAFE3, 2, title=f"t{i}") for i in range(4)]
    supervise_once()
    return RecoveryBreaker.objects.get(), runs


@pytest.fixture
def client_of(make_token_client):
    return lambda user: make_token_client(user_token(user))


@pytest.mark.django_db
def test_the_list_shows_the_open_breaker_with_its_contract_fields(tripped, viewer, client_of):
    b, _ = tripped
    r = client_of(viewer).get("/api/breakers/")
    assert r.status_code == 200
    (row,) = r.json()["results"]
    assert r.json()["next"] is None
    assert {k: row[k] for k in ("id", "agent", "tool", "signature", "tasks", "state", "closed_by", "reason")} == {
        "id": b.pk,
        "agent": "builder",
        "tool": "sleep",
        "signature": "sleep / lease_lapsed",
        "tasks": 4,
        "state": "open",
        "closed_by": "",
        "reason": "",
    }
    assert row["opened_at"].startswith(b.opened_at.date().isoformat())
    assert row["sentence"].startswith("Automatic recovery paused for builder: 4 tasks failed with `sleep`")


@pytest.mark.django_db
def test_only_an_admin_closes_it_and_a_reason_is_required(tripped, viewer, operator, admin_user, client_of):
    b, _ = tripped
    url = f"/api/breakers/{b.pk}/close/"
    for person in (viewer, operator):
        r = client_of(person).post(url, {"reason": "r"}, format="json")
        assert r.status_code == 403 and r.json()["code"] == "forbidden"
    admin = client_of(admin_user)
    for body in (
        {},
        {"reason": ""},
        {"reason": "   "},
        {"reason": "a\u0000b"},
        {"reason": ["x"]},
        {"reason": "x" * 501},
    ):
        r = admin.post(url, body, format="json")
        assert r.status_code == 400 and r.json()["code"] == "invalid" and r.json()["field"] == "reason", r.json()
    assert RecoveryBreaker.objects.get().state == "open"

    r = admin.post(url, {"reason": "the provider is back"}, format="json")
    assert r.status_code == 200
    assert (r.json()["state"], r.json()["closed_by"], r.json()["reason"]) == ("closed", "ada", "the provider is back")
    again = admin.post(url, {"reason": "twice"}, format="json")
    assert again.status_code == 409 and again.json()["code"] == "not_eligible"
    # A closed breaker stays in the list (recent).
    assert client_of(viewer).get("/api/breakers/").json()["results"][0]["state"] == "closed"


@pytest.mark.django_db
def test_another_organizations_breaker_is_not_found(tripped, other_org, client_of):
    b, _ = tripped
    stranger = client_of(make_member(other_org, "sam", "admin"))
    assert stranger.get("/api/breakers/").json()["results"] == []
    r = stranger.post(f"/api/breakers/{b.pk}/close/", {"reason": "r"}, format="json")
    assert r.status_code == 404 and r.json()["code"] == "not_found"


@pytest.mark.django_db
def test_a_held_task_continued_by_a_person_is_409_gate_closed_breaker_open(tripped, api):
    _, runs = tripped
    r = api.post(f"/api/tasks/{runs[3].task_id}/continue/", {}, format="json")
    assert r.status_code == 409, r.json()
    assert (r.json()["code"], r.json()["gate"]) == ("gate_closed", "breaker_open")
    assert "Automatic recovery paused for builder" in r.json()["detail"]
