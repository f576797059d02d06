import pytest
from django.test import Client

from tests.factories import make_agent, make_member


@pytest.fixture
def careful(org):
    """An agent that never resumes by itself: its interrupted runs open a continuation action."""
    return make_agent(org, "careful", auto_resume=False)


@pytest.fixture
def other_agent(other_org):
    return make_agent(other_org, "builder")


@pytest.fixture
def outsider(other_org):
    """An operator of another organization."""
    return make_member(other_org, "gina", "operator")


@pytest.fixture
def login():
    """A test Client signed in as `user`; `csrf=True` enforces CSRF checks like a browser would."""

    def make(user, *, csrf: bool = False) -> Client:
        client = Client(enforce_csrf_checks=csrf)
        client.force_login(user)
        return client

    return make
