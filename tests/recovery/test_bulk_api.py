"""The bulk API (API.md `/api/bulk/`): preview, execute, follow, cancel; codes, roles, boundaries, idempotency."""

import json

import pytest

from recovery.bulk.operations import bulk_advance
from recovery.models import BulkItem, BulkOperation
from tests.conftest import token_client
from tests.factories import make_agent, make_member, user_token
from tests.recovery.bulk_scenarios import unknown_outcomes

pytestmark = pytest.mark.django_db

DECIDE = {"action": "decide", "params": {"outcome": "performed", "note": "seen in the log"}}


def test_preview_execute_and_read_the_items(api, org, agent, operator):
    actions = unknown_outcomes(org, 3)
    response = api.post("/api/bulk/", {**DECIDE, "filter": {"state": "needs_decision"}}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["count"] == 3 and body["refusals"] == {} and body["status"] == "previewed"
    assert (
        len(body["scope_hash"]) == 64
        and body["expires_at"]
        and body["selection"] == {"filter": {"state": "needs_decision"}}
    )
    assert [s["task"] for s in body["sample"]] == [a.task_id for a in actions]
    assert all(s["would"] == "apply" and s["state"] == "needs_decision" for s in body["sample"])

    executed = api.post(f"/api/bulk/{body['id']}/execute/", {"scope_hash": body["scope_hash"]}, format="json")
    assert executed.status_code == 202 and executed.json()["status"] == "running"
    bulk_advance(budget=5)
    detail = api.get(f"/api/bulk/{body['id']}/").json()
    assert detail["status"] == "finished"
    assert detail["counts"] == {"total": 3, "applied": 3, "skipped": 0, "failed": 0, "pending": 0, "untouched": 0}
    assert [(i["task"], i["result"], i["reason"]) for i in detail["items"]] == [
        (a.task_id, "applied", "") for a in actions
    ]
    assert all(i["run"] and i["detail"].startswith("Decision recorded: it happened") for i in detail["items"])
    listed = api.get("/api/bulk/").json()
    assert [o["id"] for o in listed["results"]] == [body["id"]] and listed["next"] is None


def test_a_hash_that_is_not_the_previews_is_409_scope_changed(api, org, agent, operator):
    actions = unknown_outcomes(org, 1)
    body = api.post("/api/bulk/", {**DECIDE, "ids": [actions[0].task_id]}, format="json").json()
    response = api.post(f"/api/bulk/{body['id']}/execute/", {"scope_hash": "0" * 64}, format="json")
    assert response.status_code == 409 and response.json()["code"] == "scope_changed"
    again = api.post(f"/api/bulk/{body['id']}/execute/", {"scope_hash": body["scope_hash"]}, format="json")
    assert again.status_code == 202
    twice = api.post(f"/api/bulk/{body['id']}/execute/", {"scope_hash": body["scope_hash"]}, format="json")
    assert twice.status_code == 409 and twice.json()["reason"] == "not_a_preview"


def test_bad_input_gets_a_clear_error_and_nothing_is_written(api, org, agent, operator):
    unknown_outcomes(org, 1)
    cases = [
        ({"action": "explode", "ids": [1]}, 400),
        ({"action": "pause"}, 400),  # neither ids nor filter
        ({"action": "pause", "ids": [1], "filter": {}}, 400),  # both
        ({"action": "pause", "ids": ["1"]}, 400),
        ({"action": "pause", "ids": [True]}, 400),
        ({"action": "pause", "ids": [2**70]}, 400),
        ({"action": "pause", "ids": "1,2"}, 400),
        ({"action": "pause", "filter": {"state": "sideways"}}, 400),
        ({"action": "pause", "filter": {"q": "a\x00b"}}, 400),
        ({"action": "pause", "filter": {"q": "\ud800"}}, 400),
        ({"action": "pause", "filter": "state=all"}, 400),
        ({"action": "decide", "filter": {}, "params": {"outcome": "maybe"}}, 400),
        ({"action": "decide", "filter": {}, "params": {"outcome": "performed", "note": "x" * 5001}}, 400),
        ({"action": "retry", "filter": {}, "params": {"accept_duplicate_risk": "yes"}}, 400),
        ({"action": "pause", "filter": {"state": "done"}}, 400),  # nothing matches
        ({"action": "pause", "ids": [999999]}, 404),
    ]
    for body, code in cases:
        # json.dumps escapes a lone surrogate as \\ud800, as a client would send it.
        response = api.post("/api/bulk/", json.dumps(body), content_type="application/json")
        assert response.status_code == code, (body, response.content)
        assert response.json()["code"] in ("invalid", "not_found")
    assert not BulkOperation.objects.exists() and not BulkItem.objects.exists()


def test_roles_and_organizations(org, agent, operator, viewer, other_org):
    make_agent(other_org, "builder")
    theirs = unknown_outcomes(other_org, 1)[0]
    mine = unknown_outcomes(org, 1)[0]
    watcher = token_client(user_token(viewer))
    assert watcher.post("/api/bulk/", {"action": "pause", "ids": [mine.task_id]}, format="json").status_code == 403
    api = token_client(user_token(operator))
    refused = api.post("/api/bulk/", {"action": "pause", "ids": [theirs.task_id]}, format="json")
    assert refused.status_code == 404 and refused.json()["code"] == "not_found"
    op = api.post("/api/bulk/", {"action": "pause", "ids": [mine.task_id]}, format="json").json()
    gina = token_client(user_token(make_member(other_org, "gina", "admin")))
    for url in (f"/api/bulk/{op['id']}/", f"/api/bulk/{op['id']}/execute/", f"/api/bulk/{op['id']}/cancel/"):
        call = gina.get if url.endswith(f"{op['id']}/") else gina.post
        assert call(url, {"scope_hash": op["scope_hash"]}, format="json").status_code == 404, url
    assert watcher.get(f"/api/bulk/{op['id']}/").status_code == 200
    assert watcher.post(f"/api/bulk/{op['id']}/cancel/").status_code == 403


def test_the_same_idempotency_key_previews_once(api, org, agent, operator):
    actions = unknown_outcomes(org, 2)
    body = {"action": "pause", "ids": [a.task_id for a in actions]}
    first = api.post("/api/bulk/", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    second = api.post("/api/bulk/", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert first.status_code == second.status_code == 201 and first.json()["id"] == second.json()["id"]
    assert BulkOperation.objects.count() == 1
    other = api.post("/api/bulk/", {**body, "ids": [actions[0].task_id]}, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert other.status_code == 409 and other.json()["code"] == "idempotency_conflict"


def test_the_schema_describes_the_bulk_responses(api):
    schema = api.get("/api/schema/").json()
    assert "/api/bulk/" in schema["paths"] and "/api/bulk/{op_id}/execute/" in schema["paths"]
    preview = schema["components"]["schemas"]["PreviewOut"]["properties"]
    assert {"id", "count", "sample", "refusals", "scope_hash", "expires_at"} <= set(preview)
