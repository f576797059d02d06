"""A short outage does not abandon a worker's runs: it keeps retrying a write while its lease is live (it gave up
after ~7.5 s, leaving a notify step for a person to decide). Real processes: daphne, `manage.py worker`; the web
server stopped and started again, or (PostgreSQL) the database cut off behind a TCP proxy. Meanwhile the 503 says
which it is: the database unreachable (`database_unavailable`), not every connection in use (`database_busy`)."""

import subprocess
import time

import httpx
import pytest
from django.db import connection
from django.test import Client

from recovery.models import RecoveryAction
from tasks.models import Event, Run, Step
from tasks.services import task_create
from tests import processes
from tests.factories import user_token, worker_token
from tests.helpers import plan
from tests.processes import Server, TcpProxy, database_url, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

LEASE = {"CONSOLE_LEASE_SECONDS": 60, "CONSOLE_HEARTBEAT_SECONDS": 1}
# A notify step whose tool outlives the moment the outage begins: its outcome must still be recorded.
WRITE_AFTER_A_WHILE = plan(("bash", {"command": "sleep 3 && echo done > out.txt"}), ("sleep", {"seconds": 0}))


def start_worker(server: Server, token: str) -> subprocess.Popen:
    return processes.start_worker(server, token, label="outage", **LEASE)


def finished(proc: subprocess.Popen) -> str:
    try:
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return out


def assert_completed_without_a_person(run: Run, out: str) -> None:
    run.refresh_from_db()
    assert run.status == "succeeded", (run.status, out)
    assert list(Step.objects.filter(run=run).order_by("seq").values_list("phase", flat=True)) == ["completed"] * 2
    assert not RecoveryAction.objects.filter(task_id=run.task_id).exists()
    assert not Event.objects.filter(run=run, kind="run_interrupted").exists()
    assert "abandoning the run" not in out, out


def test_a_worker_outlasts_a_web_restart_longer_than_its_old_retries(org, agent):
    task = task_create(org=org, actor="t", title="write", agent="builder", input=WRITE_AFTER_A_WHILE)
    run = Run.objects.get(task=task)
    server = Server(**LEASE).start()
    proc = start_worker(server, worker_token(org))
    try:
        wait_for(lambda: Step.objects.filter(run=run, seq=1, phase="dispatched").exists(), what="the dispatch")
        # The web process dies (a crash, or a restart that does not drain): the tool finishes while nothing answers.
        server.proc.kill()
        server.stop()  # reaps it
        time.sleep(12)  # well past the ~7.5 s the worker used to retry
        assert proc.poll() is None
        server = Server(port=server.port, **LEASE).start()
        wait_for(lambda: Run.objects.get(pk=run.pk).status == "succeeded", timeout=90, what="the run to finish")
    finally:
        server.stop()
        out = finished(proc)
    assert_completed_without_a_person(run, out)
    assert "unreachable" in out  # it did meet the outage


def test_a_database_outage_is_503_database_unavailable_and_the_worker_outlasts_it(org, agent, operator):
    if connection.vendor != "postgresql":
        pytest.skip("SQLite is a file of the web process: there is no database to lose the way to")
    sd = connection.settings_dict
    proxy = TcpProxy((sd.get("HOST") or "127.0.0.1", int(sd.get("PORT") or 5432))).start()
    task = task_create(org=org, actor="t", title="write", agent="builder", input=WRITE_AFTER_A_WHILE)
    run = Run.objects.get(task=task)
    token = {"Authorization": f"Token {user_token(operator)}"}
    page = Client()
    page.force_login(operator)
    cookie = {"sessionid": page.cookies["sessionid"].value}
    server = Server(DATABASE_URL=proxy.url(database_url()), CONSOLE_DB_POOL_TIMEOUT=2, **LEASE).start()
    proc = start_worker(server, worker_token(org))
    try:
        wait_for(lambda: Step.objects.filter(run=run, seq=1, phase="dispatched").exists(), what="the dispatch")
        proxy.cut()
        cut_at = time.monotonic()

        # While it lasts, the API and the pages say the database cannot be reached, with Retry-After, never 500.
        def api_answer():
            r = httpx.get(server.url + "/api/tasks/", headers=token, timeout=30)
            return r if r.json().get("detail", "").startswith("The console cannot reach its database") else None

        refused = wait_for(api_answer, timeout=30, what="the pool to give up on the database")
        assert refused.status_code == 503 and refused.headers["Retry-After"] == "5"
        assert refused.json()["code"] == "database_unavailable"
        assert "Nothing was changed" in refused.json()["detail"]
        html = httpx.get(server.url + "/inbox/", cookies=cookie, timeout=30)
        assert html.status_code == 503 and html.headers["Retry-After"] == "5"
        assert "The console cannot reach its database" in html.text and "Try again" in html.text
        assert "in use" not in html.text  # not the busy pool's sentence
        card = httpx.get(server.url + "/inbox/", cookies=cookie, headers={"HX-Request": "true"}, timeout=30)
        assert card.status_code == 503 and card.text.startswith("The console cannot reach its database")

        time.sleep(max(0.0, 10 - (time.monotonic() - cut_at)))  # longer than the ~7.5 s the worker used to retry
        assert proc.poll() is None
        proxy.restore()
        wait_for(lambda: Run.objects.get(pk=run.pk).status == "succeeded", timeout=90, what="the run to finish")
        assert httpx.get(server.url + "/api/tasks/", headers=token, timeout=30).status_code == 200
    finally:
        server.stop()
        proxy.stop()
        out = finished(proc)
    assert_completed_without_a_person(run, out)
    assert "503" in out  # it did meet the outage
