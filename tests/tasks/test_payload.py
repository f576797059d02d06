"""Request bodies are bounded at 8 MiB: one byte more is 413 and nothing is written."""

import json

import pytest
from django.conf import settings

from tasks.models import Event, Run, Step, Task
from tests.helpers import claim, create_task, plan, snapshot

LIMIT = settings.CONSOLE_MAX_PAYLOAD


def body_of_size(size: int, make) -> bytes:
    """JSON of exactly `size` bytes: `make(padding)` builds the document around a string."""
    envelope = len(json.dumps(make(""), separators=(",", ":")).encode())
    raw = json.dumps(make("x" * (size - envelope)), separators=(",", ":")).encode()
    assert len(raw) == size
    return raw


def post_raw(client, path: str, raw: bytes):
    return client.post(path, raw, content_type="application/json")


def task_body(padding: str) -> dict:
    return {"title": "big", "agent": "builder", "input": plan(("file_write", {"path": "a", "content": padding}))}


def counts() -> tuple[int, int, int]:
    return Task.objects.count(), Run.objects.count(), Event.objects.count()


@pytest.mark.parametrize("size", [LIMIT + 1, 9 * 1024 * 1024], ids=["one_byte_over", "9_mib"])
def test_a_task_body_over_8_mib_is_refused_and_nothing_is_written(api, agent, size):
    before = counts()
    r = post_raw(api, "/api/tasks/", body_of_size(size, task_body))
    assert r.status_code == 413, r.content[:200]
    assert r.json()["code"] == "payload_too_large"
    assert counts() == before


def test_a_task_body_of_exactly_8_mib_is_accepted(api, agent):
    r = post_raw(api, "/api/tasks/", body_of_size(LIMIT, task_body))
    assert r.status_code == 201, r.content[:200]
    content = Run.objects.get(pk=r.json()["current_run"]).input["steps"][0]["args"]["content"]
    assert len(content) > LIMIT - 200 and set(content) == {"x"}


@pytest.fixture
def held(api, agent, runner):
    create_task(api, steps=plan(("file_write", {"path": "a", "content": "c"})))
    c = claim(runner)
    return c["run"], c["lease_epoch"]


def test_a_step_whose_args_fill_8_mib_is_planned_whole(runner, held):
    rid, epoch = held

    def make(padding):
        return {"epoch": epoch, "seq": 1, "tool": "file_write", "args": {"path": "a", "content": padding}}

    r = post_raw(runner, f"/api/runner/runs/{rid}/steps/", body_of_size(LIMIT, make))
    assert r.status_code == 201, r.content[:200]
    assert r.json()["phase"] == "planned"
    content = Step.objects.get(run_id=rid, seq=1).args["content"]
    assert len(content) > LIMIT - 200 and set(content) == {"x"}


def test_a_step_result_over_8_mib_is_refused_and_the_step_stays_dispatched(runner, held):
    rid, epoch = held
    step = {"epoch": epoch, "seq": 1, "tool": "file_write", "args": {"path": "a", "content": "c"}}
    assert runner.post(f"/api/runner/runs/{rid}/steps/", step, format="json").status_code == 201
    assert runner.post(f"/api/runner/runs/{rid}/steps/1/dispatch/", {"epoch": epoch}, format="json").status_code == 200
    before = snapshot(rid)

    def make(padding):
        return {"epoch": epoch, "ok": True, "result": {"bytes": 1, "echo": padding}}

    r = post_raw(runner, f"/api/runner/runs/{rid}/steps/1/complete/", body_of_size(LIMIT + 1, make))
    assert r.status_code == 413, r.content[:200]
    assert r.json()["code"] == "payload_too_large"
    assert snapshot(rid) == before
    assert Step.objects.get(run_id=rid, seq=1).phase == "dispatched"
