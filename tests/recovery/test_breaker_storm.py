"""The storm of issue 25: twenty real worker processes die on the same `http_post` call; the breaker trips, no
automatic continuation is created while it is open (counted), the header and the held tasks say why, an admin's
close lets them continue, and another agent's task is untouched throughout.

Each worker is a real `manage.py worker --once` process with `WORKER_FAULT=crash_after_dispatch:1@1`: it claims
one run, records the dispatch of step 1 (`http_post`) and exits at once, as a worker killed mid-call does. They
start five at a time (the machine running the suite has two cores); the supervisor's passes run here.
"""

import time

import pytest
from django.test import Client
from django.utils import timezone

from recovery.models import RecoveryBreaker
from recovery.modes import profile_update
from recovery.supervisor.loop import supervise_once
from tasks.models import Run, Task
from tasks.services import task_create
from tests.factories import make_agent, make_member, user_token, worker_token
from tests.helpers import plan
from tests.processes import start_worker, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

TASKS = 20
AT_ONCE = 5
POST = ("http_post", {"url": "http://127.0.0.1:9/hook", "json": {"release": "1.4"}})
SAID = "Automatic recovery paused for coder: 20 tasks failed with `http_post` / `lease_lapsed` in"


def replaying_http_post(org, name: str, admin) -> None:
    """The agent's `http_post` is replayed after a crash (its hook dedupes), so its cut-off runs resume alone."""
    profile_update(
        actor=admin,
        profile=org.agents.get(name=name).profile,
        modes={"http_post": "replay"},
        confirm_replay=["http_post"],
        reason="the hook dedupes on its request id",
    )


def automatic_continuations(agent: str) -> int:
    return Run.objects.filter(task__agent__name=agent, continues__isnull=False).count()


def test_twenty_workers_dying_on_http_post_trip_the_breaker_and_nothing_else(daphne_server, org, agent, settings):
    settings.CONSOLE_BREAKER_TASKS = 10  # the documented defaults, spelt out
    settings.CONSOLE_BREAKER_WINDOW_SECONDS = 600
    admin = make_member(org, "ada", "admin")
    viewer = make_member(org, "victor", "viewer")
    make_agent(org, "coder")
    for name in ("coder", "builder"):
        replaying_http_post(org, name, admin)
    coder = [
        task_create(org=org, actor="t", title=f"deploy {i}", agent="coder", input=plan(POST, ("sleep", {"seconds": 0})))
        for i in range(TASKS)
    ]
    bystander = task_create(org=org, actor="t", title="unrelated", agent="builder", input=plan(POST))
    token = worker_token(org)

    # Twenty-one real worker processes, five at a time: each claims one run and dies after dispatching http_post.
    for start in range(0, TASKS + 1, AT_ONCE):
        procs = [
            start_worker(daphne_server, token, "crash_after_dispatch:1@1", label=f"storm-{start + i}")
            for i in range(min(AT_ONCE, TASKS + 1 - start))
        ]
        for p in procs:
            p.communicate(timeout=120)
    first_runs = Run.objects.filter(continues__isnull=True)
    wait_for(lambda: first_runs.filter(status="running").count() == TASKS + 1, what="every run claimed")
    latest = max(first_runs.values_list("lease_expires_at", flat=True))
    time.sleep(max(0.0, (latest - timezone.now()).total_seconds()) + 0.2)

    report = supervise_once()
    assert len(report.interrupted) == TASKS + 1
    (b,) = RecoveryBreaker.objects.all()
    assert (b.agent.name, b.signature, b.state, b.tasks) == ("coder", "http_post / lease_lapsed", "open", TASKS)
    # Ten were continued before the eleventh tripped it; the ten after it are held, none continued.
    assert automatic_continuations("coder") == 10 and len(report.held) == 10
    held_tasks = set(Run.objects.filter(pk__in=report.held).values_list("task_id", flat=True))
    assert Run.objects.filter(task=bystander, continues__isnull=False).count() == 1, "another agent: untouched"

    # Pass after pass, while it is open: no automatic continuation of coder (counted).
    for _ in range(2):
        again = supervise_once()
        assert sorted(again.held) == sorted(report.held)
    assert automatic_continuations("coder") == 10

    # The header says why on every page, and a held task says the breaker holds it.
    page = Client()
    page.force_login(viewer)
    board = page.get("/").content.decode().replace("&#x27;", "'")
    assert SAID in board and f'href="/breakers/{b.pk}/"' in board
    one_held = next(iter(held_tasks))
    task_page = page.get(f"/tasks/{one_held}/").content.decode()
    assert SAID in task_page and f"recovery breaker #{b.pk} paused automatic recovery" in task_page
    listed = page.get(f"/breakers/{b.pk}/").content.decode()
    assert all(f'href="/tasks/{t.pk}/"' in listed for t in coder)

    # An admin closes it with a reason; the next pass continues every task it held.
    api = Client(HTTP_AUTHORIZATION=f"Token {user_token(admin)}")
    closed = api.post(f"/api/breakers/{b.pk}/close/", {"reason": "the hook is back"}, content_type="application/json")
    assert closed.status_code == 200 and closed.json()["state"] == "closed"
    after = supervise_once()
    assert after.held == [] and automatic_continuations("coder") == TASKS
    assert set(Task.objects.filter(runs__pk__in=after.continued).values_list("pk", flat=True)) == held_tasks
    assert SAID not in page.get("/").content.decode()
