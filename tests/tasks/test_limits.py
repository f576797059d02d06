"""Explicit limits: integers that grow are 64-bit, out-of-range input is 400 `invalid`, long strings are refused
(never truncated), odd query strings and paths are answered — nothing here is a 500."""

import pytest

from tasks.models import Step, Task
from tasks.services import MAX_SEQ, MAX_USAGE
from tests.helpers import claim, create_task, plan


def invalid(r, field: str | None = None):
    assert r.status_code == 400, (r.status_code, r.content[:300])
    body = r.json()
    assert body["code"] == "invalid", body
    if field:
        assert field in body.get("errors", {}) or body.get("field") == field, body
    return body


def held_step(api, runner, tool="sleep", args=None):
    create_task(api, steps=plan((tool, args or {"seconds": 0})))
    c = claim(runner)
    rid, epoch = c["run"], c["lease_epoch"]
    return rid, epoch


def test_a_budget_beyond_32_bits_is_kept_and_one_beyond_the_limit_is_refused(api, admin_user, agent, make_token_client):
    task = create_task(api, budget_limit=2**40)
    assert Task.objects.get(pk=task["id"]).budget_limit == 2**40
    invalid(
        api.post(
            "/api/tasks/", {"title": "t", "agent": "builder", "input": plan(), "budget_limit": 2**70}, format="json"
        ),
        "budget_limit",
    )
    from tests.factories import user_token

    admin = make_token_client(user_token(admin_user))
    r = admin.post(f"/api/tasks/{task['id']}/budget/", {"limit": 2**50, "reason": "big job"}, format="json")
    assert r.status_code == 200, r.content
    assert r.json()["budget_limit"] == 2**50
    invalid(admin.post(f"/api/tasks/{task['id']}/budget/", {"limit": 2**64, "reason": "x"}, format="json"), "limit")


def test_budget_used_grows_past_32_bits_by_itself(api, runner, agent):
    create_task(api, steps=plan(("sleep", {"seconds": 0}), ("sleep", {"seconds": 0}), ("sleep", {"seconds": 0})))
    c = claim(runner)
    rid, epoch = c["run"], c["lease_epoch"]
    for seq in (1, 2, 3):
        body = {"epoch": epoch, "seq": seq, "tool": "sleep", "args": {"seconds": 0}}
        assert runner.post(f"/api/runner/runs/{rid}/steps/", body, format="json").status_code == 201
        assert (
            runner.post(f"/api/runner/runs/{rid}/steps/{seq}/dispatch/", {"epoch": epoch}, format="json").status_code
            == 200
        )
        done = {"epoch": epoch, "ok": True, "result": {}, "usage": MAX_USAGE}
        assert runner.post(f"/api/runner/runs/{rid}/steps/{seq}/complete/", done, format="json").status_code == 200
    assert Task.objects.get(pk=c["task"]).budget_used == 3 * MAX_USAGE > 2**32


def test_usage_beyond_its_limit_is_refused_and_the_step_stays_dispatched(api, runner, agent):
    rid, epoch = held_step(api, runner)
    runner.post(
        f"/api/runner/runs/{rid}/steps/", {"epoch": epoch, "seq": 1, "tool": "sleep", "args": {}}, format="json"
    )
    runner.post(f"/api/runner/runs/{rid}/steps/1/dispatch/", {"epoch": epoch}, format="json")
    r = runner.post(
        f"/api/runner/runs/{rid}/steps/1/complete/", {"epoch": epoch, "ok": True, "usage": MAX_USAGE + 1}, format="json"
    )
    invalid(r, "usage")
    assert Step.objects.get(run_id=rid, seq=1).phase == "dispatched"


def test_nested_step_numbers_beyond_32_bits_are_kept_and_beyond_the_limit_refused(api, runner, agent):
    rid, epoch = held_step(api, runner, "subagent", {"agent": "builder", "input": plan()})
    url = f"/api/runner/runs/{rid}/steps/"
    assert (
        runner.post(
            url,
            {"epoch": epoch, "seq": 1, "tool": "subagent", "args": {"agent": "builder", "input": plan()}},
            format="json",
        ).status_code
        == 201
    )
    deep = 3 * 100_000**2 + 1  # a call of a subagent's subagent: past 2**31
    assert deep > 2**31
    r = runner.post(url, {"epoch": epoch, "seq": deep, "tool": "sleep", "args": {}, "parent_seq": 1}, format="json")
    assert r.status_code == 201, r.content
    assert Step.objects.get(run_id=rid, seq=deep).parent_seq == 1
    invalid(runner.post(url, {"epoch": epoch, "seq": MAX_SEQ + 1, "tool": "sleep", "args": {}}, format="json"), "seq")
    invalid(runner.post(url, {"epoch": epoch, "seq": 2, "tool": "x" * 101}, format="json"), "tool")


def test_overlong_strings_are_refused_not_truncated(api, operator, agent):
    invalid(api.post("/api/tasks/", {"title": "t" * 301, "agent": "builder", "input": plan()}, format="json"), "title")
    task = create_task(api)
    invalid(api.post(f"/api/tasks/{task['id']}/messages/", {"body": "b" * 20_001}, format="json"), "body")
    invalid(
        api.post(f"/api/tasks/{task['id']}/close/", {"resolution": "done", "reason": "r" * 501}, format="json"),
        "reason",
    )


def test_an_idempotency_key_longer_than_kept_is_refused_so_two_long_keys_never_collide(api, agent):
    body = {"title": "t", "agent": "builder", "input": plan()}
    first = "k" * 200 + "-first"
    second = "k" * 200 + "-second"
    for key in (first, second):
        r = api.post("/api/tasks/", body, format="json", HTTP_IDEMPOTENCY_KEY=key)
        assert invalid(r)["field"] == "Idempotency-Key"
    assert Task.objects.count() == 0
    ok = api.post("/api/tasks/", body, format="json", HTTP_IDEMPOTENCY_KEY="k" * 200)
    assert ok.status_code == 201


@pytest.mark.parametrize(
    "query",
    [
        "q=" + "9" * 5000,
        "q=%C2%B2",
        "q=%D9%A3",
        "cursor=" + "9" * 40,
        "limit=" + "9" * 40,
        "state=all&q=" + "x" * 10_000,
    ],
    ids=["long_digits", "superscript_two", "arabic_digit", "huge_cursor", "huge_limit", "long_search"],
)
def test_odd_query_strings_are_answered(api, agent, query):
    create_task(api)
    r = api.get(f"/api/tasks/?{query}")
    assert r.status_code == 200, r.content[:300]


@pytest.mark.parametrize("query", ["after=1e400", "task=-", "limit=x"])
def test_malformed_numbers_in_query_strings_are_400(api, agent, query):
    invalid(api.get(f"/api/events/?{query}"))


@pytest.mark.parametrize(
    "path",
    ["/api/tasks/99999999999999999999999999/", "/api/runs/9223372036854775808/", "/api/actions/18446744073709551616/"],
)
def test_ids_beyond_64_bits_in_paths_are_404(api, agent, path):
    r = api.get(path)
    assert r.status_code == 404 and r.json()["code"] == "not_found"
