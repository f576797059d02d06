"""Shared set-up of the figures: organizations, people, workers, queued runs. Django is imported lazily
(the registry imports every module of the package before Django is set up)."""

from __future__ import annotations

import secrets


def org_with_people(prefix: str, *, role: str = "operator"):
    """A fresh organization with an operator, an admin, an agent `builder` and a worker identity."""
    from django.contrib.auth import get_user_model

    from tasks.accounts import agent_add, member_add, org_create
    from tasks.models import Agent, Worker

    slug = f"{prefix}-{secrets.token_hex(3)}"
    org, _ = org_create(slug=slug, name=prefix.title())
    member_add(org=org, username=f"{slug}-op", role=role, password=secrets.token_hex(12))
    member_add(org=org, username=f"{slug}-admin", role="admin", password=secrets.token_hex(12))
    agent_add(org=org, name="builder")
    worker = Worker.objects.create(org=org, name="bench")
    users = get_user_model().objects
    return org, Agent.objects.get(org=org, name="builder"), users.get(username=f"{slug}-op"), worker


def worker_token(worker) -> str:
    from tasks.models import ApiToken

    key = ApiToken.new_key()
    ApiToken.objects.create(worker=worker, digest=ApiToken.hash(key))
    return key


def session_cookie(user) -> str:
    from django.test import Client

    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


def queue_tasks(org, agent, n: int, *, plan: dict | None = None, title: str = "bench task", batch: int = 2_000):
    """`n` tasks of `org`, each with one queued run, bulk-created (no workspace directories: they are never
    claimed by a tool-running worker). Returns the run ids in queue order."""
    from django.db import transaction

    from tasks.models import Run, Task

    plan = plan if plan is not None else {"steps": []}
    ids = []
    for first in range(0, n, batch):
        with transaction.atomic():
            tasks = Task.objects.bulk_create(
                [
                    Task(org=org, title=f"{title} {i}", agent=agent, status="todo")
                    for i in range(first, min(n, first + batch))
                ]
            )
            runs = Run.objects.bulk_create([Run(org=org, task=t, agent=agent, input=plan) for t in tasks])
            ids += [r.pk for r in runs]
    return ids


def vacuum_analyze() -> None:
    """Fresh planner statistics after a bulk load, as autovacuum would give a real deployment."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
