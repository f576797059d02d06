"""A worker SIGKILLed while holding a run, as operators see it: heartbeat age, stale instance, header warning."""

import re
import signal
import time

import pytest
from django.test import Client

from tasks.models import Run, Step
from tasks.services import task_create
from tests.factories import worker_token
from tests.helpers import plan
from tests.processes import manage, start_worker, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

AGE = re.compile(r"last heartbeat <time [^>]*data-ago>(\d+) s ago</time>")


def test_a_killed_worker_shows_a_growing_heartbeat_age_turns_stale_and_the_header_warns(
    daphne_server, org, agent, operator, settings
):
    settings.CONSOLE_HEARTBEAT_SECONDS = 1
    settings.CONSOLE_LEASE_SECONDS = 3
    task = task_create(org=org, actor="t", title="wait", agent="builder", input=plan(("sleep", {"seconds": 600})))
    proc = start_worker(daphne_server, worker_token(org), label="drain", CONSOLE_WORKER_DRAIN_SECONDS=3.0)
    run = Run.objects.get(task=task)
    wait_for(lambda: Step.objects.filter(run=run, seq=1, phase="dispatched").exists(), what="dispatched")
    wait_for(lambda: Run.objects.filter(pk=run.pk, last_heartbeat_at__isnull=False).exists(), what="a heartbeat")
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=10)

    page = Client()
    page.force_login(operator)

    def heartbeat_age() -> int:
        html = page.get(f"/agents/builder/runs/{run.pk}/").content.decode()
        return int(AGE.search(html).group(1))

    first = heartbeat_age()
    time.sleep(2.1)
    assert heartbeat_age() >= first + 2

    def instance_alive() -> str:
        html = page.get("/workers/").content.decode()
        return re.search(r'data-alive="(\w+)">\s*<td>w1', html).group(1)

    assert "drain" in page.get("/workers/").content.decode()  # its instance label
    wait_for(lambda: instance_alive() == "false", timeout=10, what="the instance shown stale")

    # Its lease lapses; the supervisor interrupts the run and queues the continuation (sleep is replay)...
    wait_for(lambda: Run.objects.filter(pk=run.pk, lease_expires_at__lt=now()).exists(), what="lapse")
    manage("supervise", "--once")
    assert Run.objects.get(continues=run).status == "queued"
    # ...which no worker will take: the header says so on every page.
    html = page.get("/").content.decode()
    assert 'data-alert="no_worker"' in html and "Runs are queued in Acme and no worker has been seen since" in html
    assert 'data-alert="no_worker"' in page.get(f"/tasks/{task.pk}/").content.decode()


def now():
    from django.utils import timezone

    return timezone.now()
