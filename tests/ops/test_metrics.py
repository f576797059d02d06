"""/metrics: Prometheus text, guarded, per organization, moving with the engine."""

import httpx
import pytest
from django.test import Client

from recovery.supervisor.loop import supervise_once
from tests.factories import make_agent, make_member, user_token, worker_token
from tests.live.wsclient import LiveSocket
from tests.ops.metric_samples import samples
from tests.processes import Server, wait_for
from tests.recovery.engine import SAFE, WRITE, claim, first_run, interrupted, run_to_end, start

pytestmark = pytest.mark.django_db
SCRAPE = "scrape-token-0123456789"


def scrape(client, token: str | None, scheme: str = "Bearer"):
    headers = {"Authorization": f"{scheme} {token}"} if token is not None else {}
    return client.get("/metrics", headers=headers)


@pytest.fixture
def scrape_token(settings):
    settings.CONSOLE_METRICS_TOKEN = SCRAPE
    return SCRAPE


def test_without_credentials_it_is_not_there_and_with_the_wrong_ones_forbidden(client, org, operator, scrape_token):
    assert scrape(client, None).status_code == 404
    assert scrape(client, "nope").status_code == 403
    assert scrape(client, user_token(operator), "Token").status_code == 403  # not an admin
    assert scrape(client, worker_token(org)).status_code == 403
    client.force_login(make_member(org, "ada", "admin"))
    assert scrape(client, None).status_code == 404  # a session is not a scrape credential


def test_the_scrape_token_sees_every_organization_and_an_admin_only_their_own(
    client, org, agent, other_org, admin_user, scrape_token
):
    make_agent(other_org, "builder")
    run_to_end(first_run(start(org, [SAFE])))
    start(other_org, [SAFE])
    every = samples(scrape(client, scrape_token).content.decode())
    assert every[("console_runs", ("org", "acme"), ("status", "succeeded"))] == 1
    assert every[("console_runs", ("org", "globex"), ("status", "queued"))] == 1
    response = scrape(client, user_token(admin_user), "Token")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/plain; version=0.0.4")
    mine = samples(response.content.decode())
    assert mine[("console_runs", ("org", "acme"), ("status", "succeeded"))] == 1
    assert not [k for k in mine if ("org", "globex") in k]


def test_counters_and_gauges_move_with_the_engine(client, org, agent, scrape_token):
    before = samples(scrape(client, scrape_token).content.decode())
    assert not [k for k in before if k[0] == "console_runs"]
    supervise_once(label="sup-a")
    run = interrupted(org, [SAFE, WRITE], 2)  # step 2 (a file_write) of unknown outcome
    supervise_once(label="sup-a")
    claim(first_run(start(org, [SAFE], title="running")))
    after = samples(scrape(client, scrape_token).content.decode())
    assert after[("console_runs", ("org", "acme"), ("status", "interrupted"))] == 1
    assert after[("console_runs", ("org", "acme"), ("status", "running"))] == 1
    assert after[("console_live_actions", ("kind", "unknown_outcome"), ("org", "acme"))] == 1
    age = after[("console_live_action_oldest_age_seconds", ("kind", "unknown_outcome"), ("org", "acme"))]
    assert 0 <= age < 60
    assert after[("console_supervisor_passes_total", ("supervisor", "sup-a"))] == 2
    assert after[("console_supervisor_pass_duration_seconds_count", ("supervisor", "sup-a"))] == 2
    assert after[("console_supervisor_pass_duration_seconds_bucket", ("le", "+Inf"), ("supervisor", "sup-a"))] == 2
    assert after[("console_supervisor_alive",)] == 1
    assert after[("console_worker_instances_alive", ("org", "acme"))] == 1
    assert run.status == "interrupted"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_commit_to_push_latency_is_observed_by_the_relay_of_the_process_that_pushed(org, agent, operator):
    server = Server(CONSOLE_METRICS_TOKEN=SCRAPE, CONSOLE_RELAY_POLL_SECONDS="0.1").start()
    try:

        def pushes() -> float:
            text = httpx.get(server.url + "/metrics", headers={"Authorization": f"Bearer {SCRAPE}"}).text
            return samples(text).get(("console_event_push_latency_seconds_count",), 0.0)

        assert pushes() == 0
        page = Client()
        page.force_login(operator)
        socket = LiveSocket(
            f"ws://127.0.0.1:{server.port}/ws/board/",
            origin=server.url,
            cookie=f"sessionid={page.cookies['sessionid'].value}",
        ).open()
        try:
            socket.send_json({"type": "resync", "last_event": 0, "reconnect": False})
            socket.receive_until(lambda m: 'id="live-cursor"' in m)
            start(org, [SAFE], title="pushed")  # task_created + run_queued
            socket.receive_until(lambda m: "pushed" in m)
            wait_for(lambda: pushes() >= 2, timeout=10, what="the relay's observations")
            text = httpx.get(server.url + "/metrics", headers={"Authorization": f"Bearer {SCRAPE}"}).text
            assert samples(text)[("console_event_push_latency_seconds_bucket", ("le", "30.0"))] >= 2
        finally:
            socket.close()
    finally:
        server.stop()
