"""Worker instances and supervisor passes, as the workers page, its API and the header show them."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from recovery.models import SupervisorPass, SupervisorProcess
from recovery.supervisor.loop import supervise_once
from tasks import services
from tasks.models import Event, Run, WorkerInstance
from tasks.worker_instances import forget_polls
from tests.factories import make_agent, make_member
from tests.recovery.engine import SAFE, claim, first_run, start, worker

pytestmark = pytest.mark.django_db


def held(org, title="t", **extra) -> Run:
    run = claim(first_run(start(org, [SAFE, SAFE], title=title, **extra)))
    return run


def test_a_claim_poll_records_the_instance_even_when_nothing_is_queued(org, agent):
    w = worker(org)
    assert services.run_claim(worker=w, label="host-1-1") is None
    inst = WorkerInstance.objects.get(worker=w, instance="host-1-1")
    assert inst.org_id == org.pk and inst.last_claim_at is None and inst.last_heartbeat_at is None
    first_seen = inst.first_seen_at

    run = held(org)
    inst = WorkerInstance.objects.get(worker=w, instance="w1-test")
    assert inst.last_claim_at is not None and run.lease_owner == "w1/w1-test"
    forget_polls()  # the second in which host-1-1's poll was recorded has passed
    services.run_claim(worker=w, label="host-1-1")
    again = WorkerInstance.objects.get(worker=w, instance="host-1-1")
    assert again.first_seen_at == first_seen and again.last_seen_at > first_seen


def test_a_heartbeat_is_one_update_per_row_and_no_event(org, agent):
    run = held(org)
    events = Event.objects.count()
    with CaptureQueriesContext(connection) as queries:
        services.run_heartbeat(worker=run.lease_worker, run_id=run.pk, epoch=run.lease_epoch)
    writes = [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith(("UPDATE", "INSERT"))]
    assert len(writes) == 2 and all(w.lstrip().upper().startswith("UPDATE") for w in writes), writes
    assert Event.objects.count() == events
    run.refresh_from_db()
    inst = WorkerInstance.objects.get(instance="w1-test")
    assert run.last_heartbeat_at is not None and inst.last_heartbeat_at == run.last_heartbeat_at


def test_the_api_lists_instances_with_the_runs_they_hold_within_the_organization(
    org, agent, other_org, api, make_token_client
):
    from tests.factories import user_token

    run = held(org)
    make_agent(other_org, "builder")
    held(other_org, title="theirs")
    body = api.get("/api/workers/").json()
    assert body["next"] is None
    [row] = body["results"]
    assert row["identity"] == "w1" and row["instance"] == "w1-test" and row["org"] == "acme" and row["alive"]
    assert row["runs"] == [
        {
            "id": run.pk,
            "status": "running",
            "lease_expires_at": run.lease_expires_at.isoformat(),
            "last_heartbeat_at": None,
        }
    ]
    stranger = make_token_client(user_token(make_member(other_org, "gina", "viewer")))
    [theirs] = stranger.get("/api/workers/").json()["results"]
    assert theirs["org"] == "globex" and theirs["runs"][0]["id"] != run.pk


def test_a_private_tasks_run_is_counted_not_shown_to_whom_may_not_see_it(org, agent, make_token_client):
    from tests.factories import user_token

    creator = make_member(org, "carl", "operator")
    run = held(org, private=True, creator=creator)
    viewer = make_token_client(user_token(make_member(org, "vic", "viewer")))
    [row] = viewer.get("/api/workers/").json()["results"]
    assert row["runs"] == [] and row["hidden_runs"] == 1
    [row] = make_token_client(user_token(creator)).get("/api/workers/").json()["results"]
    assert [r["id"] for r in row["runs"]] == [run.pk] and row["hidden_runs"] == 0


def test_people_only(client, runner):
    assert client.get("/api/workers/").status_code in (401, 403)
    assert runner.get("/api/workers/").status_code == 403


def test_the_workers_page_shows_alive_and_stale_instances_and_the_supervisor(org, agent, operator, client):
    run = held(org)
    services.run_claim(worker=worker(org), label="idle-1")
    WorkerInstance.objects.filter(instance="idle-1").update(last_seen_at=timezone.now() - timedelta(minutes=5))
    supervise_once(label="sup-a")
    client.force_login(operator)
    html = client.get("/workers/").content.decode()
    assert "w1-test" in html and f"run #{run.pk}</a> running" in html and "no heartbeat yet" in html
    live_row = html[html.index("w1-test") - 400 : html.index("w1-test")]
    assert 'data-alive="true"' in live_row
    stale_row = html[html.index("idle-1") - 400 : html.index("idle-1")]
    assert 'data-alive="false"' in stale_row
    assert "sup-a" in html and 'data-supervisor-alive="true"' in html


def test_the_workers_page_needs_a_membership(django_user_model, client):
    client.force_login(django_user_model.objects.create_user("nobody", password="x"))
    assert client.get("/workers/").status_code == 404


def test_a_running_run_shows_its_heartbeat_age_and_lease_expiry(org, agent, operator, client):
    run = held(org)
    client.force_login(operator)
    page = client.get(f"/agents/builder/runs/{run.pk}/").content.decode()
    assert "claimed <time" in page and "no heartbeat yet" in page and "lease ends <time" in page
    services.run_heartbeat(worker=run.lease_worker, run_id=run.pk, epoch=run.lease_epoch)
    Run.objects.filter(pk=run.pk).update(last_heartbeat_at=timezone.now() - timedelta(seconds=42))
    page = client.get(f"/tasks/{run.task_id}/").content.decode()
    assert "last heartbeat <time" in page and "data-ago>42 s ago</time>" in page


# --- supervisor passes -------------------------------------------------------------


def test_every_pass_is_counted_and_a_pass_that_did_something_is_recorded_per_organization(org, agent, other_org):
    supervise_once(label="sup-a")
    process = SupervisorProcess.objects.get(label="sup-a")
    assert process.passes == 1 and process.last_duration >= 0 and sum(process.buckets.values()) >= 1
    assert not SupervisorPass.objects.exists()  # nothing to do, nothing recorded but the count

    make_agent(other_org, "builder")
    mine = held(org)
    theirs = held(other_org)
    Run.objects.filter(pk__in=[mine.pk, theirs.pk]).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    supervise_once(label="sup-a")
    process.refresh_from_db()
    assert process.passes == 2
    recorded = SupervisorPass.objects.get()
    assert recorded.did == {
        str(org.pk): {"interrupted": 1, "continued": 1},
        str(other_org.pk): {"interrupted": 1, "continued": 1},
    }


def test_the_page_shows_only_the_viewers_share_of_a_pass(org, agent, other_org, operator, client):
    make_agent(other_org, "builder")
    theirs = held(other_org)
    Run.objects.filter(pk=theirs.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    supervise_once(label="sup-a")
    client.force_login(operator)
    html = client.get("/workers/").content.decode()
    assert "Recent passes" not in html  # the pass changed nothing in acme


# --- the header --------------------------------------------------------------------


def alerts(client) -> list[str]:
    html = client.get("/").content.decode()
    return [a for a in ("supervisor_never", "supervisor_silent", "no_worker") if f'data-alert="{a}"' in html]


def test_the_header_warns_when_no_supervisor_passed_for_three_intervals(org, agent, operator, client, settings):
    settings.CONSOLE_SUPERVISE_SECONDS = 5
    client.force_login(operator)
    assert alerts(client) == ["supervisor_never"]
    supervise_once(label="sup-a")
    assert alerts(client) == []
    SupervisorProcess.objects.update(last_pass_at=timezone.now() - timedelta(seconds=14))
    assert alerts(client) == []
    SupervisorProcess.objects.update(last_pass_at=timezone.now() - timedelta(seconds=16))
    assert alerts(client) == ["supervisor_silent"]
    assert "No supervisor pass since <time" in client.get("/inbox/").content.decode()


def test_the_header_warns_when_runs_are_queued_and_no_worker_was_seen_for_a_lease_period(
    org, agent, operator, client, settings
):
    supervise_once(label="sup-a")
    client.force_login(operator)
    assert alerts(client) == []
    start(org, [SAFE])  # queued, and no worker ever seen
    assert alerts(client) == ["no_worker"]
    services.run_claim(worker=worker(org), label="w-1")  # takes it
    start(org, [SAFE], title="second")
    assert alerts(client) == []
    WorkerInstance.objects.update(last_seen_at=timezone.now() - timedelta(seconds=settings.CONSOLE_LEASE_SECONDS + 1))
    assert alerts(client) == ["no_worker"]
    html = client.get("/").content.decode()
    assert "Runs are queued in Acme and no worker has been seen since <time" in html


def test_another_organizations_queue_is_not_this_headers_business(org, agent, other_org, operator, client):
    supervise_once(label="sup-a")
    make_agent(other_org, "builder")
    start(other_org, [SAFE])
    client.force_login(operator)
    assert alerts(client) == []
