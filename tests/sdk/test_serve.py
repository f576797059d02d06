"""`serve`: claim filters, runs at once, and the drain on SIGTERM of an agent process."""

import signal
import threading
import time

import pytest

from tasks.models import Event, Run, Step
from tasks.services import task_create
from tests.helpers import plan
from tests.processes import wait_for
from tests.sdk.agents import PLAN, Counts
from tests.sdk.conftest import agent_task
from tests.sdk.drive import start_agent

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_serve_claims_only_its_agents_runs(daphne_server, org, agent, coder, console, serving):
    plan_task = task_create(org=org, actor="t", title="script", agent="builder", input=plan(("sleep", {"seconds": 0})))
    other = task_create(org=org, actor="t", title="other", agent="builder", input={"prompt": "not for coder"})
    _task, mine = agent_task(org)
    seen = []
    assert serving(console, "coder", lambda run: seen.append((run.agent, run.kind, run.prompt)) or "ok").join() == 1
    assert seen == [("coder", "agent", "Write the notes.")]
    mine.refresh_from_db()
    assert mine.status == "succeeded" and mine.output == "ok"
    assert Run.objects.get(task=plan_task).status == Run.objects.get(task=other).status == "queued"
    # kinds narrows too: a plan-only server of any agent leaves the agent prompt alone.
    assert serving(console, None, lambda run: seen.append(run.kind), kinds=["plan"]).join() == 1
    assert seen[-1] == "plan" and Run.objects.get(task=other).status == "queued"


def test_concurrency_runs_that_many_runs_at_once(daphne_server, org, coder, console, serving):
    runs = [agent_task(org, title=f"t{i}")[1] for i in range(2)]
    both = threading.Barrier(2, timeout=20)

    def agent(run):
        # Each run waits inside a step for the other: only two runs at once get past it.
        return run.tool("meet", {"run": run.id}, lambda: both.wait() >= 0)

    assert serving(console, "coder", agent, concurrency=2).join() == 2
    for run in runs:
        run.refresh_from_db()
        assert run.status == "succeeded" and run.output is True


def test_sigterm_lets_the_current_call_finish_and_leaves_the_run_to_its_lease(
    daphne_server, org, coder, token, tmp_path
):
    _task, run = agent_task(org, plan=PLAN)
    counts = Counts(tmp_path)
    proc = start_agent(daphne_server, token, counts, slow=1.5)
    wait_for(lambda: any(t["tool"] == "slow_write" for t in counts.read("tools")), timeout=60, what="slow_write")
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0, out
    assert time.monotonic() - sent < 3, out  # within the drain time (3 s)
    # The call in flight finished and was recorded; nothing new started; the run was not finished.
    assert Step.objects.get(run=run, seq=6).phase == "completed"
    assert not Step.objects.filter(run=run, seq__gt=6).exists() and len(counts.read("model")) == 3
    assert not Event.objects.filter(run=run, kind__in=("run_finished", "run_stopped")).exists()
    run.refresh_from_db()
    assert run.status == "running"  # until its lease lapses and the supervisor continues it


def test_a_second_sigterm_exits_at_once(daphne_server, org, coder, token, tmp_path):
    _task, run = agent_task(org, plan=PLAN)
    counts = Counts(tmp_path)
    proc = start_agent(daphne_server, token, counts, slow=60)
    wait_for(lambda: any(t["tool"] == "slow_write" for t in counts.read("tools")), timeout=60, what="slow_write")
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert time.monotonic() - sent < 1.5, out
    assert Step.objects.get(run=run, seq=6).phase == "dispatched"


def test_tools_declared_with_the_decorator_are_registered_and_called_with_their_arguments(
    daphne_server, org, coder, console, serving, admin_user, make_token_client
):
    from recovery_console import tool
    from tests.factories import user_token

    @tool(mode="notify")
    def note_append(path: str, line: str) -> dict:
        """Append a line to a file of the workspace"""
        return {"appended": line, "to": path}

    @tool(name="lookup", mode="replay", description="Look a word up")
    def look_up(word: str) -> dict:
        return {"word": word, "found": True}

    _task, run = agent_task(org)

    def agent(r):
        return [r.tool(note_append, {"path": "a.md", "line": "x"}), r.tool(look_up, {"word": "recovery"})]

    serving(console, "coder", agent, tools=[note_append, look_up]).join()
    run.refresh_from_db()
    assert run.status == "succeeded"
    assert run.output == [{"appended": "x", "to": "a.md"}, {"word": "recovery", "found": True}]
    assert list(Step.objects.filter(run=run).order_by("seq").values_list("tool", "recovery_mode")) == [
        ("note_append", "notify"),
        ("lookup", "replay"),
    ]
    settings = make_token_client(user_token(admin_user)).get("/api/agents/coder/settings/").json()
    described = {t["tool"]: t.get("description") for t in settings["tools"]}
    assert described["note_append"] == "Append a line to a file of the workspace"
    assert described["lookup"] == "Look a word up"
