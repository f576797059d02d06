"""Every write of the SDK survives a dropped connection: retried with the same Idempotency-Key, applied once.

A proxy between the SDK and the console forwards each request, lets the console apply it, then throws its
answer away and closes the connection — the first attempt of every write. The SDK cannot know whether the
write happened; it sends it again with the same key, and the console answers from its record.
"""

import time
from collections import Counter
from pathlib import Path

import pytest

from recovery_console import Console
from tasks.models import Event, Step
from tests.sdk.agents import PLAN, TOOLS, Counts, make_agent
from tests.sdk.conftest import agent_task
from tests.sdk.proxy import Proxy, first_attempt_of_each_key

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_every_write_cut_off_once_is_retried_and_applied_once(daphne_server, org, coder, token, serving, tmp_path):
    task, run = agent_task(org, plan=PLAN[:2])
    counts = Counts(tmp_path)
    steps = make_agent(counts)

    def agent(r):
        output = steps(r)
        # The run outlasts two heartbeat periods (1 s here), so a heartbeat is cut and sent again too.
        time.sleep(2.5)
        return output

    with Proxy(daphne_server.url, cut=first_attempt_of_each_key()) as proxy:
        with Console(proxy.url, token, retry_seconds=10, backoff=0.05) as console:
            serving(console, "coder", agent, tools=TOOLS).join()

    run.refresh_from_db()
    assert run.status == "succeeded", run.error_detail
    assert run.output["answer"] == "Done: 2 planned call(s)."
    # Each model turn and tool call ran once, and its side effect is on disk once.
    assert len(counts.read("model")) == 3 and len(counts.read("tools")) == 2
    assert (Path(task.workspace) / "notes.md").read_text() == "one\ntwo\n"
    # The console applied each write once: one event per step phase, one claim, one finish.
    kinds = Counter(Event.objects.filter(run=run).values_list("kind", flat=True))
    assert kinds["run_claimed"] == 1
    assert kinds["step_planned"] == kinds["step_dispatched"] == kinds["step_completed"] == 5
    assert kinds["run_finished"] == 1
    assert Step.objects.filter(run=run).count() == 5
    # Every kind of write was cut once and sent again with its key, and the second answer got through.
    cut = [w for w in proxy.writes() if not w.delivered and w.key]
    retried = {w.key for w in proxy.writes() if w.delivered}
    # (a heartbeat cut as the run ended is not sent again: there is no lease left to renew)
    assert {w.key for w in cut if "/heartbeat/" not in w.path} <= retried
    assert {w.key for w in cut if "/heartbeat/" in w.path} & retried
    # (a heartbeat that crossed the finish is refused: the run had ended)
    assert all(200 <= w.status < 300 for w in proxy.writes() if w.delivered and "/heartbeat/" not in w.path)
    # (a step is planned and dispatched in one request, `"dispatch": true`: the SDK sends no /dispatch/ here)
    assert not any(w.path.endswith("/dispatch/") for w in proxy.writes())
    for endpoint in ("/claim/", "/tools/", "/heartbeat/", "/steps/", "/complete/", "/finish/"):
        assert any(w.path.endswith(endpoint) for w in cut), (endpoint, [w.path for w in cut])


def test_an_async_agent_planning_a_turn_ahead_survives_cut_writes_too(daphne_server, org, coder, token, serving):
    """One model turn asks for two calls: planned in one batch request, run in parallel, each applied once."""
    import asyncio

    task, run = agent_task(org)
    ran = []
    wanted = [("note_append", {"path": "a.md", "line": "x"}), ("note_append", {"path": "b.md", "line": "y"})]

    async def model(request):
        ran.append("model")
        return {"calls": [{"name": n, "args": a} for n, a in wanted], "usage": {"input_tokens": 12, "output_tokens": 3}}

    async def agent(r):
        async def note(args):
            ran.append(args["path"])
            await asyncio.sleep(0.05)
            (Path(r.workspace) / args["path"]).write_text(args["line"])
            return {"written": args["path"]}

        turn = await r.amodel("scripted-async", {"prompt": r.prompt}, model)
        calls = [(c["name"], c["args"]) for c in turn["calls"]]
        await r.aplan_ahead(calls)
        results = await asyncio.gather(*(r.atool(n, a, note, files=[a["path"]]) for n, a in reversed(calls)))
        return {"results": results}

    with Proxy(daphne_server.url, cut=first_attempt_of_each_key()) as proxy:
        with Console(proxy.url, token, retry_seconds=10, backoff=0.05) as console:
            serving(console, "coder", agent).join()

    run.refresh_from_db()
    assert run.status == "succeeded", run.error_detail
    assert sorted(ran) == ["a.md", "b.md", "model"]
    assert run.output == {"results": [{"written": "b.md"}, {"written": "a.md"}]}
    steps = list(Step.objects.filter(run=run).order_by("seq").values_list("seq", "tool", "args", "phase"))
    assert [(s[0], s[1], s[3]) for s in steps] == [(1, "model", "completed"), (2, "note_append", "completed"),
                                                   (3, "note_append", "completed")]  # fmt: skip
    assert steps[1][2] == wanted[0][1] and steps[2][2] == wanted[1][1]  # numbered as planned, run in any order
    kinds = Counter(Event.objects.filter(run=run).values_list("kind", flat=True))
    assert kinds["step_planned"] == kinds["step_dispatched"] == kinds["step_completed"] == 3
    # Two plan requests: the model turn's, and one batch for both calls — cut once each, then answered.
    plans = proxy.writes(f"/runs/{run.pk}/steps/")
    plans = [w for w in plans if w.path.endswith("/steps/")]
    assert len({w.key for w in plans}) == 2 and sum(not w.delivered for w in plans) == 2
    assert Step.objects.get(run=run, seq=1).usage_detail == {"input_tokens": 12, "output_tokens": 3}
    assert (Path(task.workspace) / "a.md").read_text() == "x" and (Path(task.workspace) / "b.md").read_text() == "y"
