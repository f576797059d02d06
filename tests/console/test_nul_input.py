"""NUL (and lone surrogates) in forms, query strings, paths, headers and cookies: 400 with a reason, never 500."""

import pytest
from django.test import Client

from tasks.models import Message
from tests.helpers import visible_text


@pytest.fixture
def task(org, agent, operator):
    from tasks.services import task_create
    from tests.console.scenarios import SAFE_PLAN

    return task_create(org=org, actor="t", title="t", agent="builder", input=SAFE_PLAN, creator=operator)


@pytest.mark.parametrize(
    "path",
    [
        "/?q=a%00b",
        "/?state=%00",
        "/inbox/?x=%00",
        "/agents/build%00er/runs/1/",
        "/settings/tools/?agent=%00",
        "/settings/tools/a%00b/",
        "/tasks/1/workspace/?held=%00",
        "/accounts/login/?next=%00",
        "/admin/tasks/task/?q=%00",
    ],
)
def test_a_nul_in_a_page_address_is_a_400_page_with_the_reason(login, admin_user, task, path):
    r = login(admin_user).get(path)
    assert r.status_code == 400, (path, r.status_code)
    assert "NUL character" in visible_text(r.content.decode())


@pytest.mark.parametrize("path", ["/api/tasks/?q=a%00b", "/api/events/?after=%00", "/api/agents/a%00/settings/"])
def test_a_nul_in_an_api_address_is_a_400_with_code_invalid(api, agent, path):
    r = api.get(path)
    assert r.status_code == 400 and r.json()["code"] == "invalid", r.content


def test_a_nul_in_a_form_field_is_a_400_and_saves_nothing(login, operator, task):
    r = login(operator).post(f"/tasks/{task.pk}/messages/", {"body": "hello\x00world"})
    assert r.status_code == 400
    assert Message.objects.count() == 0


def test_a_nul_in_the_sign_in_form_is_a_400(db):
    r = Client().post("/accounts/login/", {"username": "ada\x00", "password": "x"})
    assert r.status_code == 400


def test_a_nul_in_the_session_cookie_or_a_header_is_a_400(db, api):
    client = Client()
    client.cookies["sessionid"] = "abc\x00def"
    assert client.get("/").status_code == 400
    r = api.post("/api/tasks/", {}, format="json", HTTP_IDEMPOTENCY_KEY="k\x00")
    assert r.status_code == 400 and r.json()["field"] == "headers"


def test_a_nul_in_a_json_body_is_data_not_an_error(api, agent):
    """The middleware leaves JSON bodies to the payload encoding: a NUL in an argument is kept."""
    body = '{"title": "t", "agent": "builder", "input": {"steps": [{"tool": "bash", "args": {"command": "a\\u0000"}}]}}'
    r = api.post("/api/tasks/", body, content_type="application/json")
    assert r.status_code == 201, r.content
