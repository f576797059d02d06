"""Every id a caller passes is resolved under the caller's visibility: another person's private task (or
another organization's object) is 404, answered exactly as an id that does not exist — nothing says it exists."""

import pytest

from tasks.models import Task
from tasks.services import task_create
from tests.console.scenarios import unknown_outcome_action
from tests.factories import make_agent, make_member, user_token
from tests.helpers import plan

PLAN = plan(("sleep", {"seconds": 0}))
MISSING = 999_999


@pytest.fixture
def private_task(org, agent, operator):
    """A private task of olive's: only olive and the organization's admins see it."""
    return task_create(
        org=org,
        actor=operator,
        creator=operator,
        title="olive's secret plan",
        agent="builder",
        input=PLAN,
        private=True,
    )


@pytest.fixture
def oscar(org, make_token_client):
    """Another operator of the same organization."""
    return make_token_client(user_token(make_member(org, "oscar", "operator")))


def same_refusal(hidden, missing, hidden_id: int):
    assert hidden.status_code == missing.status_code == 404, (hidden.content, missing.content)
    a, b = hidden.json(), missing.json()
    assert a["code"] == b["code"] == "not_found"
    assert a["detail"].replace(str(hidden_id), "N") == b["detail"].replace(str(MISSING), "N")
    assert "secret" not in hidden.content.decode()


def test_a_private_parent_of_another_person_is_404_like_a_missing_one(oscar, private_task):
    before = Task.objects.count()
    body = {"title": "child", "agent": "builder", "input": PLAN}
    hidden = oscar.post("/api/tasks/", {**body, "parent": private_task.pk}, format="json")
    missing = oscar.post("/api/tasks/", {**body, "parent": MISSING}, format="json")
    same_refusal(hidden, missing, private_task.pk)
    assert Task.objects.count() == before


def test_the_creator_and_an_admin_may_name_the_private_parent(api, admin_user, make_token_client, private_task):
    body = {"title": "child", "agent": "builder", "input": PLAN, "parent": private_task.pk}
    assert api.post("/api/tasks/", body, format="json").status_code == 201  # olive, its creator
    admin = make_token_client(user_token(admin_user))
    assert admin.post("/api/tasks/", body, format="json").status_code == 201


def test_a_private_dependency_of_another_person_is_404_like_a_missing_one(oscar, org, agent, private_task):
    mine = oscar.post("/api/tasks/", {"title": "mine", "agent": "builder", "input": PLAN}, format="json").json()
    url = f"/api/tasks/{mine['id']}/dependencies/"
    same_refusal(
        oscar.post(url, {"add": [private_task.pk]}, format="json"),
        oscar.post(url, {"add": [MISSING]}, format="json"),
        private_task.pk,
    )


def test_an_agent_of_another_organization_reads_as_no_such_agent(api, agent, other_org):
    make_agent(other_org, "spy")
    foreign = api.post("/api/tasks/", {"title": "t", "agent": "spy", "input": PLAN}, format="json")
    missing = api.post("/api/tasks/", {"title": "t", "agent": "nobody", "input": PLAN}, format="json")
    assert foreign.status_code == missing.status_code == 400
    assert foreign.json()["detail"].replace("spy", "N") == missing.json()["detail"].replace("nobody", "N")


def test_an_action_of_another_persons_private_task_is_404_like_a_missing_one(org, agent, operator, oscar):
    action = unknown_outcome_action(org, private=True, creator=operator)
    for suffix, body in (("", None), ("retry/", {"version": action.version}), ("cancel/", {"version": 1})):
        url = f"/api/actions/{{}}/{suffix}"
        call = oscar.get if body is None else (lambda u, b=body: oscar.post(u, b, format="json"))
        hidden = call(url.format(action.pk))
        missing = call(url.format(MISSING))
        same_refusal(hidden, missing, action.pk)
