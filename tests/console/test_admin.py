"""The Django admin changes nothing behind the services' back."""

import pytest
from django.test import Client

from tasks.models import Event, Membership


@pytest.fixture
def staff(org):
    from tests.factories import make_member

    user = make_member(org, "sam", "admin")
    user.is_staff = True
    user.is_superuser = True
    user.save()
    return user


def test_a_role_changed_in_the_admin_goes_through_the_service_and_appends_its_event(org, staff, viewer):
    client = Client()
    client.force_login(staff)
    membership = Membership.objects.get(user=viewer, org=org)
    events = Event.objects.filter(kind="member_set").count()
    response = client.post(f"/admin/tasks/membership/{membership.pk}/change/", {"role": "operator"})
    assert response.status_code == 302, response.content[:500]
    assert Membership.objects.get(pk=membership.pk).role == "operator"
    event = Event.objects.filter(kind="member_set").latest("id")
    assert Event.objects.filter(kind="member_set").count() == events + 1
    assert event.payload == {"username": "victor", "role": "operator"} and event.actor == "sam"


@pytest.mark.parametrize("model", ["task", "run", "organization", "membership", "agent", "worker", "apitoken"])
def test_nothing_can_be_added_or_deleted_in_the_admin(org, staff, model):
    client = Client()
    client.force_login(staff)
    assert client.get(f"/admin/tasks/{model}/add/").status_code == 403


def test_a_task_cannot_be_edited_in_the_admin(org, agent, staff):
    from tests.recovery import engine as e

    task = e.start(org, [e.SAFE], title="before")
    client = Client()
    client.force_login(staff)
    client.post(f"/admin/tasks/task/{task.pk}/change/", {"title": "after", "status": "done"})
    task.refresh_from_db()
    assert (task.title, task.status) == ("before", "todo")
