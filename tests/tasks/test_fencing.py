"""Runner writes are fenced by the lease: a stale, lapsed or foreign holder changes nothing."""

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from tasks.models import Run
from tests.factories import user_token, worker_token
from tests.helpers import claim, create_task, plan, snapshot

WRITES = ("heartbeat", "plan", "dispatch", "complete", "finish")


def write_request(write: str, epoch: int) -> tuple[str, dict]:
    """Path (relative to the run) and body of a write that the current holder may make."""
    return {
        "heartbeat": ("heartbeat/", {"epoch": epoch}),
        "plan": ("steps/", {"epoch": epoch, "seq": 1, "tool": "file_read", "args": {"path": "a"}}),
        "dispatch": ("steps/1/dispatch/", {"epoch": epoch}),
        "complete": ("steps/1/complete/", {"epoch": epoch, "ok": True, "result": {"content": "x"}}),
        "finish": ("finish/", {"epoch": epoch, "status": "failed"}),
    }[write]


def post(client, run_id: int, path: str, body: dict):
    return client.post(f"/api/runner/runs/{run_id}/{path}", body, format="json")


@pytest.fixture
def held(api, agent, runner):
    """A claimed run of a one-step plan: (run id, lease epoch)."""
    create_task(api, steps=plan(("file_read", {"path": "a"})))
    c = claim(runner)
    return c["run"], c["lease_epoch"]


def prepare(runner, held, write: str) -> tuple[int, int, str, dict]:
    """Bring step 1 to the phase where `write` is the next legitimate call."""
    rid, epoch = held
    if write in ("dispatch", "complete"):
        assert post(runner, rid, *write_request("plan", epoch)).status_code == 201
    if write == "complete":
        assert post(runner, rid, *write_request("dispatch", epoch)).status_code == 200
    return rid, epoch, *write_request(write, epoch)


@pytest.mark.parametrize("write", WRITES)
def test_the_holder_at_the_current_epoch_is_accepted(runner, held, write):
    rid, _, path, body = prepare(runner, held, write)
    r = post(runner, rid, path, body)
    assert r.status_code in (200, 201), r.content


FAULTS = ["epoch_behind", "epoch_ahead", "lease_lapsed", "other_worker", "other_org_worker", "run_finished"]


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("write", WRITES)
def test_a_fenced_write_is_stale_lease_and_changes_nothing(
    runner, held, write, fault, org, other_org, make_token_client
):
    rid, epoch, path, body = prepare(runner, held, write)
    client = runner
    if fault == "epoch_behind":
        body["epoch"] = epoch - 1
    elif fault == "epoch_ahead":
        body["epoch"] = epoch + 1
    elif fault == "lease_lapsed":
        Run.objects.filter(pk=rid).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    elif fault == "other_worker":
        client = make_token_client(worker_token(org, "w2"))
    elif fault == "other_org_worker":
        client = make_token_client(worker_token(other_org, "w1"))
    else:  # the worker itself ended the run: it holds nothing any more
        assert post(runner, rid, *write_request("finish", epoch)).status_code == 200
    before = snapshot(rid)

    r = post(client, rid, path, body)

    assert r.status_code == 409, r.content
    assert r.json()["code"] == "stale_lease"
    assert snapshot(rid) == before


def runner_calls(run_id: int) -> list[tuple[str, dict]]:
    calls = [("/api/runner/claim/", {"worker": "x"})]
    for write in WRITES:
        path, body = write_request(write, 1)
        calls.append((f"/api/runner/runs/{run_id}/{path}", body))
    return calls


def test_a_persons_token_is_forbidden_on_every_runner_endpoint(api, held, admin_user, make_token_client):
    rid, _ = held
    before = snapshot(rid)
    for client in (api, make_token_client(user_token(admin_user))):
        for path, body in runner_calls(rid):
            r = client.post(path, body, format="json")
            assert r.status_code == 403, (path, r.content)
            assert r.json()["code"] == "forbidden"
    assert snapshot(rid) == before


def test_a_worker_token_is_forbidden_on_operator_endpoints(runner, held, api):
    rid, _ = held
    task_id = Run.objects.get(pk=rid).task_id
    before = snapshot(rid)
    calls = [
        ("get", "/api/tasks/", None),
        ("post", "/api/tasks/", {"title": "t", "agent": "builder", "input": plan(("sleep", {"seconds": 0}))}),
        ("get", f"/api/tasks/{task_id}/", None),
        ("get", f"/api/runs/{rid}/", None),
        ("post", f"/api/runs/{rid}/stop/", {}),
        ("get", "/api/events/", None),
    ]
    for method, path, body in calls:
        r = getattr(runner, method)(path, body, format="json") if body is not None else runner.get(path)
        assert r.status_code == 403, (path, r.content)
        assert r.json()["code"] == "forbidden"
    assert snapshot(rid) == before
    assert api.get(f"/api/runs/{rid}/").json()["status"] == "running"


@pytest.mark.parametrize("credentials", [None, "Token not-a-real-key"])
def test_without_valid_credentials_every_endpoint_is_not_authenticated(held, credentials):
    rid, _ = held
    task_id = Run.objects.get(pk=rid).task_id
    client = APIClient()
    if credentials:
        client.credentials(HTTP_AUTHORIZATION=credentials)
    before = snapshot(rid)
    posts = [*runner_calls(rid), ("/api/tasks/", {"title": "t"}), (f"/api/runs/{rid}/stop/", {})]
    gets = ["/api/tasks/", f"/api/tasks/{task_id}/", f"/api/runs/{rid}/", "/api/events/"]
    responses = [client.post(p, b, format="json") for p, b in posts] + [client.get(p) for p in gets]
    for r in responses:
        assert r.status_code == 401, (r.wsgi_request.path, r.content)
        assert r.json()["code"] == "not_authenticated"
    assert snapshot(rid) == before
