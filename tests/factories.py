import factory
from django.contrib.auth import get_user_model

from tasks.accounts import agent_add, member_add, org_create, token_issue
from tasks.models import Organization


class OrgFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Organization
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"org{n}")
    name = factory.LazyAttribute(lambda o: o.slug.title())


def make_org(slug: str = "acme"):
    org, _ = org_create(slug=slug, name=slug.title())
    return org


def make_member(org, username: str, role: str = "operator", password: str = "pw-12345678"):
    member_add(org=org, username=username, role=role, password=password)
    return get_user_model().objects.get(username=username)


def make_agent(org, name: str = "builder", auto_resume: bool = True):
    return agent_add(org=org, name=name, auto_resume=auto_resume)


def worker_token(org, name: str = "w1") -> str:
    return token_issue(worker=name, org=org)


def user_token(user) -> str:
    return token_issue(username=user.username)
