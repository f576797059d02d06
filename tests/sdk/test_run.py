"""The SDK against a live console: reuse on a continuation, stop at a step boundary, a lost lease."""

import logging
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from recovery_console import Console
from tasks.models import Event, Run, Step
from tasks.services import leases_expire, run_request_stop
from tests.processes import lapse_and_supervise, wait_for
from tests.sdk.agents import PLAN, TOOLS, Counts, make_agent
from tests.sdk.conftest import agent_task
from tests.sdk.proxy import Proxy

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def dispatched(run, seq=1):
    return Step.objects.filter(run=run, seq=seq, phase="dispatched").exists()


def writes(run):
    return list(Event.objects.filter(run=run).order_by("id").values_list("kind", flat=True))


def test_a_continuation_reuses_saved_turns_and_tool_results_without_calling_them(
    daphne_server, org, coder, console, serving, tmp_path
):
    task, first = agent_task(org, plan=PLAN[:2])
    one = Counts(tmp_path / "one")
    # Model turns 1 and 2 and both tool calls complete; the third turn (step 5) dies mid-call.
    serving(console, "coder", make_agent(one, crash_on_turn=3), tools=TOOLS).join()
    assert len(one.read("model")) == 3 and [t["args"]["line"] for t in one.read("tools")] == ["one", "two"]
    assert [(s.seq, s.tool, s.phase) for s in Step.objects.filter(run=first).order_by("seq")] == [
        (1, "model", "completed"),
        (2, "note_append", "completed"),
        (3, "model", "completed"),
        (4, "note_append", "completed"),
        (5, "model", "dispatched"),
    ]

    lapse_and_supervise(first)
    second = Run.objects.get(continues=first)
    two = Counts(tmp_path / "two")
    serving(console, "coder", make_agent(two), tools=TOOLS).join()

    second.refresh_from_db()
    assert second.status == "succeeded", second.error_detail
    # The saved turns came back without a model call; only the turn that was cut off is called again.
    assert len(two.read("model")) == 1 and two.read("model")[0]["turn"] == 5
    assert two.read("tools") == []
    assert (Path(task.workspace) / "notes.md").read_text() == "one\ntwo\n"
    steps = {s.seq: s for s in Step.objects.filter(run=second)}
    assert all(steps[seq].reused_from_id for seq in (1, 2, 3, 4))
    assert steps[5].reused_from_id is None and steps[5].phase == "completed"
    assert second.output == {"answer": "Done: 2 planned call(s).", "notices": [], "followups": []}


def test_stop_ends_the_run_at_the_next_step_boundary(daphne_server, org, coder, console, serving, operator):
    _task, run = agent_task(org)
    release, ran = threading.Event(), []

    def agent(r):
        r.tool("wait", {"n": 1}, lambda: (ran.append("wait"), release.wait(20), {"waited": True})[-1])
        r.tool("never", {"n": 2}, lambda: ran.append("never"))
        return "unreachable"

    s = serving(console, "coder", agent)
    wait_for(lambda: dispatched(run), what="step 1 dispatched")
    run_request_stop(actor=operator, run=run)
    release.set()
    s.join()

    run.refresh_from_db()
    assert run.status == "stopped" and run.stop_receipt["by"] == "worker"
    assert ran == ["wait"]
    assert list(Step.objects.filter(run=run).values_list("seq", "phase")) == [(1, "completed")]


def test_a_lease_taken_away_mid_call_writes_nothing_more(daphne_server, org, coder, console, serving, caplog):
    _task, run = agent_task(org)
    release, ran = threading.Event(), []

    def agent(r):
        r.tool("wait", {"n": 1}, lambda: (ran.append("wait"), release.wait(20), {"waited": True})[-1])
        r.tool("after", {"n": 2}, lambda: ran.append("after"))
        return "unreachable"

    s = serving(console, "coder", agent)
    wait_for(lambda: dispatched(run), what="step 1 dispatched")
    caplog.set_level(logging.WARNING, logger="recovery_console")
    leases_expire(now=timezone.now() + timedelta(hours=1))  # the supervisor takes the run back
    run.refresh_from_db()
    assert run.status == "interrupted"
    before = writes(run)
    # The next heartbeat is refused (409 stale_lease): the SDK knows before the call even returns.
    wait_for(lambda: "lease is stale" in caplog.text, what="the heartbeat's 409")
    release.set()
    s.join()

    assert ran == ["wait"]
    assert writes(run) == before
    assert list(Step.objects.filter(run=run).values_list("seq", "phase")) == [(1, "dispatched")]


def test_no_renewal_for_a_lease_period_is_a_lost_lease(daphne_server, org, coder, token, serving, caplog):
    _task, run = agent_task(org)
    release, ran = threading.Event(), []

    def agent(r):
        r.tool("wait", {"n": 1}, lambda: (ran.append("wait"), release.wait(20), {"waited": True})[-1])
        r.tool("after", {"n": 2}, lambda: ran.append("after"))
        return "unreachable"

    caplog.set_level(logging.WARNING, logger="recovery_console")
    # Heartbeats never reach the console (a network partition): after a lease period the run is not ours.
    with Proxy(daphne_server.url, drop=lambda method, path: "/heartbeat/" in path) as proxy:
        with Console(proxy.url, token, retry_seconds=10) as console:
            s = serving(console, "coder", agent)
            wait_for(lambda: dispatched(run), what="step 1 dispatched")
            before = writes(run)
            wait_for(lambda: "treating it as lost" in caplog.text, timeout=10, what="the lease period to pass")
            release.set()
            s.join()

    assert ran == ["wait"]
    assert writes(run) == before
    assert list(Step.objects.filter(run=run).values_list("seq", "phase")) == [(1, "dispatched")]
    assert proxy.writes("/heartbeat/") and not any(w.delivered for w in proxy.writes("/heartbeat/"))


def test_an_agent_that_takes_another_path_on_replay_is_refused_before_anything_runs(
    daphne_server, org, coder, console, serving, tmp_path
):
    task, first = agent_task(org, plan=PLAN[:2])
    serving(console, "coder", make_agent(Counts(tmp_path / "one"), crash_on_turn=3), tools=TOOLS).join()
    lapse_and_supervise(first)
    second = Run.objects.get(continues=first)

    two = Counts(tmp_path / "two")
    serving(console, "coder", make_agent(two, variant="aside"), tools=TOOLS).join()

    second.refresh_from_db()
    assert second.status == "failed" and second.error_code == "diverged"
    assert two.read("model") == [] and two.read("tools") == []
    assert (Path(task.workspace) / "notes.md").read_text() == "one\ntwo\n"
    # Step 3 (the second model turn) was asked with another request: nothing of this run was planned anew.
    assert not Step.objects.filter(run=second, reused_from__isnull=True).exists()
