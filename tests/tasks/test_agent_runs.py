"""Agent runs through the runner and operator APIs (API.md, Agent runs): an agent prompt as a task's input,
claims narrowed by agent and kind, steps numbered as the agent goes, batches of one model turn's calls,
model turns with their token usage, the agent's output, and its tool catalogue."""

import hashlib
import json

import pytest

from tasks.models import Event, Run, Step, Task
from tests.factories import make_agent
from tests.helpers import claim, create_task, plan, snapshot

DIGEST = hashlib.sha256(b'{"messages":[]}').hexdigest()


def prompt_task(api, text="Write the report", agent="coder", **extra):
    return create_task(api, agent=agent, steps={"prompt": text, **extra})


def claim_as(runner, **body):
    r = runner.post("/api/runner/claim/", {"worker": "w1-a", **body}, format="json")
    assert r.status_code in (200, 204), r.content
    return r.json() if r.status_code == 200 else None


def step(runner, c, seq, tool="file_read", args=None, **extra):
    body = {"epoch": c["lease_epoch"], "seq": seq, "tool": tool, "args": args or {"path": f"f{seq}"}, **extra}
    return runner.post(f"/api/runner/runs/{c['run']}/steps/", body, format="json")


def run_step(runner, c, seq, tool="file_read", args=None, *, ok=True, result=None, usage=None):
    assert step(runner, c, seq, tool, args).status_code == 201
    r = runner.post(f"/api/runner/runs/{c['run']}/steps/{seq}/dispatch/", {"epoch": c["lease_epoch"]}, format="json")
    assert r.status_code == 200, r.content
    body = {"epoch": c["lease_epoch"], "ok": ok, "result": result if result is not None else {"n": seq}}
    if usage is not None:
        body["usage"] = usage
    r = runner.post(f"/api/runner/runs/{c['run']}/steps/{seq}/complete/", body, format="json")
    assert r.status_code == 200, r.content
    return r.json()


def finish(runner, c, status="succeeded", **extra):
    return runner.post(
        f"/api/runner/runs/{c['run']}/finish/", {"epoch": c["lease_epoch"], "status": status, **extra}, format="json"
    )


def model_args(name="claude", digest=DIGEST, **extra):
    return {"model": name, "digest": digest, **extra}


@pytest.fixture
def coder(org):
    return make_agent(org, "coder")


# --- run kinds and claims ---------------------------------------------------------------------------------


def test_a_prompt_is_a_task_input_its_run_is_an_agent_run_and_other_keys_are_kept(api, runner, coder):
    task = prompt_task(api, "Summarise the logs", context={"repo": "x"})
    run = api.get(f"/api/runs/{task['current_run']}/").json()
    assert run["kind"] == "agent" and run["input"] == {"prompt": "Summarise the logs", "context": {"repo": "x"}}
    c = claim(runner)
    assert c["kind"] == "agent" and c["input"]["prompt"] == "Summarise the logs"
    assert c["reused"] == [] and c["notices"] == [] and c["next_seq"] == 1
    assert c["lease_seconds"] > 0 and c["heartbeat_seconds"] > 0


@pytest.mark.parametrize(
    "bad",
    [{"prompt": ""}, {"prompt": "   "}, {"prompt": 7}, {"prompt": "x", "steps": []}, {"promt": "x"}, {}],
)
def test_an_input_that_is_neither_a_plan_nor_a_prompt_is_refused_and_nothing_is_created(api, coder, bad):
    before = Task.objects.count()
    r = api.post("/api/tasks/", {"title": "t", "agent": "coder", "input": bad}, format="json")
    assert r.status_code == 400 and r.json()["code"] == "invalid"
    assert Task.objects.count() == before


def test_a_claim_takes_only_the_agents_and_kinds_it_names(api, runner, agent, coder):
    scripted = create_task(api, steps=plan(("sleep", {"seconds": 0})))  # builder, a plan
    other = prompt_task(api, agent="builder")  # builder, an agent prompt
    mine = prompt_task(api)  # coder, an agent prompt
    assert claim_as(runner, agents=["nobody"]) is None
    assert claim_as(runner, kinds=["agent"], agents=["coder"])["run"] == mine["current_run"]
    assert claim_as(runner, kinds=["agent"], agents=["coder"]) is None  # nothing else of coder's is queued
    assert claim_as(runner, kinds=["plan"])["run"] == scripted["current_run"]
    assert claim_as(runner, kinds=["plan"]) is None
    assert claim_as(runner)["run"] == other["current_run"]  # no filter: any run, as before


def test_a_claim_filter_that_is_not_a_list_of_kinds_is_refused(runner, coder):
    r = runner.post("/api/runner/claim/", {"worker": "w", "kinds": ["script"]}, format="json")
    assert r.status_code == 400 and r.json()["code"] == "invalid"


# --- numbering ------------------------------------------------------------------------------------------


def test_an_agent_numbers_its_steps_in_order_skipping_ahead_is_a_seq_conflict(api, runner, coder):
    prompt_task(api)
    c = claim(runner)
    assert step(runner, c, 1).status_code == 201
    before = snapshot(c["run"])
    r = step(runner, c, 3)
    assert r.status_code == 409 and r.json()["code"] == "seq_conflict" and r.json()["next_seq"] == 2
    assert snapshot(c["run"]) == before  # refused: nothing saved
    assert step(runner, c, 2, "model", model_args()).status_code == 201


def test_planning_a_taken_seq_again_is_idempotent_with_the_same_call_and_a_conflict_with_another(api, runner, coder):
    prompt_task(api)
    c = claim(runner)
    first = step(runner, c, 1, "file_read", {"path": "a"})
    assert first.status_code == 201
    again = step(runner, c, 1, "file_read", {"path": "a"})
    assert again.status_code == 201 and again.json() == first.json()
    assert Step.objects.filter(run_id=c["run"]).count() == 1
    before = snapshot(c["run"])
    other = step(runner, c, 1, "file_read", {"path": "b"})
    assert other.status_code == 409 and other.json()["code"] == "seq_conflict"
    assert other.json()["saved"] == {"tool": "file_read", "args": {"path": "a"}}
    assert snapshot(c["run"]) == before


def test_a_plan_run_keeps_its_own_rules_for_a_taken_seq(api, runner, agent):
    create_task(api, steps=plan(("file_read", {"path": "a"}), ("sleep", {"seconds": 0})))
    c = claim(runner)
    assert step(runner, c, 1, "file_read", {"path": "a"}).status_code == 201
    r = step(runner, c, 1, "file_read", {"path": "b"})
    assert r.status_code == 409 and r.json()["code"] == "not_eligible"


@pytest.mark.parametrize("tool", ["subagent", "foreach"])
def test_an_agent_run_may_not_plan_the_plan_only_tools(api, runner, coder, tool):
    prompt_task(api)
    c = claim(runner)
    r = step(runner, c, 1, tool, {"agent": "coder", "input": {"steps": []}})
    assert r.status_code == 400 and r.json()["code"] == "invalid"
    child = runner.post(
        f"/api/runner/runs/{c['run']}/tasks/",
        {"epoch": c["lease_epoch"], "title": "child", "input": plan(("sleep", {"seconds": 0}))},
        format="json",
    )
    assert child.status_code == 409 and child.json()["reason"] == "plan_only"


# --- batches --------------------------------------------------------------------------------------------


def batch(runner, c, calls):
    body = {"epoch": c["lease_epoch"], "steps": [{"seq": s, "tool": t, "args": a} for s, t, a in calls]}
    return runner.post(f"/api/runner/runs/{c['run']}/steps/", body, format="json")


def test_one_model_turns_calls_are_planned_in_one_batch_and_again_with_the_same_answer(api, runner, coder):
    prompt_task(api)
    c = claim(runner)
    calls = [(1, "model", model_args()), (2, "file_write", {"path": "a", "content": "x"}), (3, "fetch", {"url": "u"})]
    r = batch(runner, c, calls)
    assert r.status_code == 201
    assert r.json() == {
        "steps": [
            {"seq": 1, "phase": "planned", "recovery_mode": "replay"},
            {"seq": 2, "phase": "planned", "recovery_mode": "notify"},
            {"seq": 3, "phase": "planned", "recovery_mode": "replay"},
        ]
    }
    events = Event.objects.count()
    assert batch(runner, c, calls).json() == r.json()  # idempotent: the saved steps, nothing new
    assert Event.objects.count() == events and Step.objects.filter(run_id=c["run"]).count() == 3


def test_a_batch_is_all_or_nothing(api, runner, coder):
    prompt_task(api)
    c = claim(runner)
    before = snapshot(c["run"])
    r = batch(runner, c, [(1, "file_read", {"path": "a"}), (2, "fetch", {"url": "u"}), (4, "sleep", {})])
    assert r.status_code == 409 and r.json()["code"] == "seq_conflict" and r.json()["index"] == 2
    assert snapshot(c["run"]) == before  # steps 1 and 2 were not saved either
    r = batch(runner, c, [(1, "file_read", {"path": "a"}), (2, "model", {"model": "m", "digest": "not hex"})])
    assert r.status_code == 400 and snapshot(c["run"]) == before


def test_a_batch_holds_one_to_sixty_four_steps_and_not_both_forms(api, runner, coder):
    prompt_task(api)
    c = claim(runner)
    too_many = batch(runner, c, [(i, "sleep", {}) for i in range(1, 66)])
    assert too_many.status_code == 400
    assert batch(runner, c, []).status_code == 400
    both = runner.post(
        f"/api/runner/runs/{c['run']}/steps/",
        {"epoch": c["lease_epoch"], "seq": 1, "tool": "sleep", "steps": [{"seq": 1, "tool": "sleep"}]},
        format="json",
    )
    assert both.status_code == 400
    assert batch(runner, c, [(i, "sleep", {}) for i in range(1, 65)]).status_code == 201


def test_a_stale_epoch_refuses_a_batch_with_stale_lease(api, runner, coder):
    prompt_task(api)
    c = claim(runner)
    body = {"epoch": c["lease_epoch"] + 1, "steps": [{"seq": 1, "tool": "sleep", "args": {}}]}
    r = runner.post(f"/api/runner/runs/{c['run']}/steps/", body, format="json")
    assert r.status_code == 409 and r.json()["code"] == "stale_lease"


# --- model turns and usage ---------------------------------------------------------------------------------


def test_a_model_turn_keeps_its_tokens_and_counts_them_as_its_units(api, runner, coder):
    task = prompt_task(api)
    c = claim(runner)
    run_step(runner, c, 1, "model", model_args(request={"messages": []}), result={"text": "hi"},
             usage={"input_tokens": 120, "output_tokens": 30, "cost": 0.0021})  # fmt: skip
    run_step(runner, c, 2, usage=3)
    assert finish(runner, c, output={"answer": "hi"}).status_code == 200
    run = api.get(f"/api/runs/{c['run']}/").json()
    first = run["steps"][0]
    assert first["usage"] == 150 and first["usage_detail"] == {"input_tokens": 120, "output_tokens": 30, "cost": 0.0021}
    assert run["usage"] == {"spent": 153, "reused": 0, "spent_again": 0}
    assert run["output"] == {"answer": "hi"} and run["status"] == "succeeded"
    assert api.get(f"/api/tasks/{task['id']}/").json()["budget_used"] == 153


@pytest.mark.parametrize(
    "args",
    [{"model": "m"}, {"digest": DIGEST}, {"model": "", "digest": DIGEST}, {"model": "m", "digest": DIGEST.upper()}],
)
def test_a_model_turn_names_its_model_and_the_digest_of_its_request(api, runner, coder, args):
    prompt_task(api)
    c = claim(runner)
    r = step(runner, c, 1, "model", args)
    assert r.status_code == 400 and r.json()["code"] == "invalid"


@pytest.mark.parametrize(
    "usage",
    [{"input_tokens": -1}, {"input_tokens": "9"}, {"output_tokens": 2**40}, {"cost": -1}, "lots", [1], 2**40],
)
def test_a_usage_that_is_neither_units_nor_tokens_is_refused_and_the_step_stays_dispatched(api, runner, coder, usage):
    prompt_task(api)
    c = claim(runner)
    step(runner, c, 1, "model", model_args())
    runner.post(f"/api/runner/runs/{c['run']}/steps/1/dispatch/", {"epoch": c["lease_epoch"]}, format="json")
    r = runner.post(
        f"/api/runner/runs/{c['run']}/steps/1/complete/",
        {"epoch": c["lease_epoch"], "ok": True, "result": {}, "usage": usage},
        format="json",
    )
    assert r.status_code == 400 and Step.objects.get(run_id=c["run"], seq=1).phase == "dispatched"


# --- finish ---------------------------------------------------------------------------------------------


def test_an_agent_run_succeeds_when_the_agent_returns_and_keeps_its_output(api, runner, coder):
    task = prompt_task(api)
    c = claim(runner)
    run_step(runner, c, 1)
    step(runner, c, 2)  # planned ahead and never called: the agent returned first
    r = finish(runner, c, output=["done", {"files": 2}])
    assert r.status_code == 200 and r.json()["output"] == ["done", {"files": 2}] and r.json()["kind"] == "agent"
    assert Run.objects.get(pk=c["run"]).output == ["done", {"files": 2}]
    assert api.get(f"/api/tasks/{task['id']}/").json()["state"] == "done"


def test_an_agent_run_with_a_call_in_flight_cannot_succeed(api, runner, coder):
    prompt_task(api)
    c = claim(runner)
    step(runner, c, 1)
    runner.post(f"/api/runner/runs/{c['run']}/steps/1/dispatch/", {"epoch": c["lease_epoch"]}, format="json")
    r = finish(runner, c)
    assert r.status_code == 409 and r.json()["code"] == "not_eligible"


def test_an_output_over_the_payload_limit_is_refused_and_the_run_goes_on(api, runner, coder, settings):
    settings.CONSOLE_MAX_PAYLOAD = 1000
    prompt_task(api)
    c = claim(runner)
    r = finish(runner, c, output="x" * 2000)
    assert r.status_code == 413 and Run.objects.get(pk=c["run"]).status == "running"


@pytest.mark.parametrize(
    "body",
    [
        {"status": "failed", "error_code": "diverged"},
        {"status": "failed", "error_code": "diverged", "diverged": {"seq": 2, "saved": {"tool": "a"}}},
        {"status": "succeeded", "error_code": "diverged", "diverged": {"seq": 1, "saved": {"tool": "a"},
                                                                         "asked": {"tool": "b"}}},
        {"status": "failed", "diverged": {"seq": 1, "saved": {"tool": "a"}, "asked": {"tool": "b"}}},
    ],
)  # fmt: skip
def test_a_diverged_finish_needs_both_calls_and_the_failed_status(api, runner, coder, body):
    prompt_task(api)
    c = claim(runner)
    assert finish(runner, c, **body).status_code == 400
    assert Run.objects.get(pk=c["run"]).status == "running"


# --- the tool catalogue -------------------------------------------------------------------------------------

TOOLS = [
    {"name": "search_docs", "mode": "replay", "description": "Search the product docs"},
    {"name": "send_mail", "mode": "notify", "description": "Send an email to a customer"},
    {"name": "file_write", "mode": "replay"},
]


def register(runner, agent="coder", tools=TOOLS):
    return runner.post(f"/api/runner/agents/{agent}/tools/", {"tools": tools}, format="json")


def test_a_worker_registers_its_agents_tools_and_their_modes_decide_each_new_step(api, runner, coder, admin_user):
    r = register(runner)
    assert r.status_code == 200
    body = r.json()
    assert body["agent"] == "coder" and [t["name"] for t in body["tools"]] == ["file_write", "search_docs", "send_mail"]
    assert body["tools"][0] == {"name": "file_write", "default_mode": "replay", "mode": "replay", "description": ""}
    assert body["tools"][2] == {
        "name": "send_mail",
        "default_mode": "notify",
        "mode": "notify",
        "description": "Send an email to a customer",
    }
    prompt_task(api)
    c = claim(runner)
    got = {}
    for i, tool in enumerate(["send_mail", "file_write", "model", "mystery", "file_edit"], start=1):
        args = model_args() if tool == "model" else {}
        got[tool] = step(runner, c, i, tool, args).json()["recovery_mode"]
    # registered, registered (it overrides the built-in notify), reserved, unknown → forget, built in
    assert got == {"send_mail": "notify", "file_write": "replay", "model": "replay", "mystery": "forget",
                   "file_edit": "notify"}  # fmt: skip


def test_an_admins_override_wins_over_the_catalogue(api, runner, coder, admin_user):
    from recovery.modes import profile_update

    register(runner)
    profile_update(actor=admin_user, profile=coder.profile, modes={"search_docs": "forget"}, reason="flaky")
    tools = {t["name"]: t for t in register(runner).json()["tools"]}
    assert tools["search_docs"]["default_mode"] == "replay" and tools["search_docs"]["mode"] == "forget"
    prompt_task(api)
    c = claim(runner)
    assert step(runner, c, 1, "search_docs", {}).json()["recovery_mode"] == "forget"


def test_registering_replaces_the_catalogue_and_records_what_changed_once(runner, coder):
    register(runner)
    first = Event.objects.filter(kind="tools_registered").get()
    assert [t["name"] for t in first.payload["added"]] == ["file_write", "search_docs", "send_mail"]
    register(runner)  # a worker registers at every start: the same catalogue changes nothing
    assert Event.objects.filter(kind="tools_registered").count() == 1
    register(runner, tools=[{"name": "search_docs", "mode": "notify", "description": "Search"}])
    last = Event.objects.filter(kind="tools_registered").order_by("-id").first()
    assert last.payload["removed"] == ["file_write", "send_mail"] and last.payload["added"] == []
    assert last.payload["modes"] == [{"name": "search_docs", "from": "replay", "to": "notify"}]
    assert last.payload["descriptions"] == ["search_docs"]
    coder.profile.refresh_from_db()
    assert set(coder.profile.tool_catalogue) == {"search_docs"}


@pytest.mark.parametrize(
    "tools",
    [
        [{"name": "model", "mode": "replay"}],
        [{"name": "a", "mode": "replay"}, {"name": "a", "mode": "notify"}],
        [{"name": "a b", "mode": "replay"}],
        [{"name": "a", "mode": "sometimes"}],
        [{"name": "a"}],
        "all",
    ],
)
def test_a_catalogue_that_cannot_be_saved_is_refused_whole(runner, coder, tools):
    register(runner)
    r = runner.post("/api/runner/agents/coder/tools/", {"tools": tools}, format="json")
    assert r.status_code == 400 and r.json()["code"] == "invalid"
    coder.profile.refresh_from_db()
    assert set(coder.profile.tool_catalogue) == {"file_write", "search_docs", "send_mail"}


def test_only_a_worker_of_the_agents_organization_registers_its_tools(org, other_org, coder, api, make_token_client):
    from tests.factories import worker_token

    stranger = make_token_client(worker_token(other_org, "w9"))
    assert register(stranger).status_code == 404
    assert register(make_token_client(worker_token(org, "w2")), agent="nobody").status_code == 404
    assert api.post("/api/runner/agents/coder/tools/", {"tools": []}, format="json").status_code == 403
    coder.profile.refresh_from_db()
    assert coder.profile.tool_catalogue is None


def test_the_settings_api_lists_the_registered_tools_with_their_descriptions(runner, coder, admin_user,
                                                                              make_token_client):  # fmt: skip
    from tests.factories import user_token

    admin = make_token_client(user_token(admin_user))
    before = admin.get("/api/agents/coder/settings/").json()
    assert before["registered"] is False and before["unknown_outcome"] == "ask_person"
    register(runner)
    body = admin.get("/api/agents/coder/settings/").json()
    assert body["registered"] is True
    tools = {t["tool"]: t for t in body["tools"]}
    assert set(tools) == {"file_write", "search_docs", "send_mail"}
    assert tools["send_mail"] == {
        "tool": "send_mail",
        "default": "notify",
        "mode": "notify",
        "description": "Send an email to a customer",
        "registered": True,
    }
    assert json.dumps(body)  # plain JSON
