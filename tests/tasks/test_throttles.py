"""Follow-up messages and decision notes are rate-limited per person: 429 `throttled` with the wait, nothing saved;
the API and the console's forms share one count, kept in the database cache (every web process sees it)."""

import pytest
from django.conf import settings

from tasks.models import Message
from tests.console.scenarios import unknown_outcome_action
from tests.helpers import create_task


def rate(scope: str) -> int:
    return int(settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"][scope].split("/")[0])


def test_messages_beyond_the_rate_are_429_and_not_saved_and_pages_share_the_count(api, agent, operator, client):
    task = create_task(api)
    limit = rate("messages")
    for i in range(limit - 1):
        assert api.post(f"/api/tasks/{task['id']}/messages/", {"body": f"m{i}"}, format="json").status_code == 201
    client.force_login(operator)
    page = client.post(f"/tasks/{task['id']}/messages/", {"body": "from the page"}, HTTP_HX_REQUEST="true")
    assert page.status_code == 200  # the last one allowed, written on the page
    r = api.post(f"/api/tasks/{task['id']}/messages/", {"body": "one too many"}, format="json")
    assert r.status_code == 429 and r.json()["code"] == "throttled"
    assert "at most" in r.json()["detail"] and int(r["Retry-After"]) >= 1
    page = client.post(f"/tasks/{task['id']}/messages/", {"body": "typed on the page"}, HTTP_HX_REQUEST="true")
    assert page.status_code == 429
    assert "Too many follow-up messages" in page.content.decode()
    assert "typed on the page" in page.content.decode()  # what was typed is handed back
    assert Message.objects.count() == limit


def test_the_count_is_per_person(api, agent, admin_user, make_token_client):
    from tests.factories import user_token

    task = create_task(api)
    for i in range(rate("messages")):
        api.post(f"/api/tasks/{task['id']}/messages/", {"body": f"m{i}"}, format="json")
    assert api.post(f"/api/tasks/{task['id']}/messages/", {"body": "x"}, format="json").status_code == 429
    other = make_token_client(user_token(admin_user))
    assert other.post(f"/api/tasks/{task['id']}/messages/", {"body": "x"}, format="json").status_code == 201


@pytest.mark.django_db
def test_decision_notes_beyond_the_rate_are_429(org, agent, operator, api):
    action = unknown_outcome_action(org)
    url = f"/api/actions/{action.pk}/decision/"
    body = {"version": action.version, "outcome": "unresolved", "note": "still checking"}
    for _ in range(rate("notes")):
        r = api.post(url, body, format="json")
        assert r.status_code == 200, r.content
        body["version"] = r.json()["version"]
    r = api.post(url, body, format="json")
    assert r.status_code == 429 and r.json()["code"] == "throttled"
