"""Recovering agent runs through the real engine (runner API, supervisor, operator API, pages): a continuation
carries the chain's whole history and its notices, a cut-off model turn is called again and its tokens count
again, a person or the agent's setting hands an unknown outcome to the agent, a replay that diverged opens its
action with both calls, and the tool catalogue decides what is still available."""

import pytest
from django.test import Client

from recovery.models import RecoveryAction, RecoveryAttempt
from recovery.modes import profile_update
from recovery.supervisor.loop import supervise_once
from tasks.models import Run, Step
from tests.agents_api import Agent, model_args, prompt_task
from tests.factories import make_agent
from tests.helpers import claim, create_task, outer_html, plan, visible_text
from tests.recovery import engine
from tests.recovery.agent_scenarios import WRITE, crash_and_supervise, diverge, history, parked


@pytest.fixture
def coder(org):
    return make_agent(org, "coder")


def decide(api, action, outcome, note="", **extra):
    version = api.get(f"/api/actions/{action.pk}/").json()["version"]
    body = {"version": version, "outcome": outcome, "note": note, **extra}
    return api.post(f"/api/actions/{action.pk}/decision/", body, format="json")


# --- a continuation carries the chain's whole history ------------------------------------------------------


def test_agent_verifies_admits_a_continuation_that_carries_every_saved_step_and_the_notice(api, runner, coder):
    task, _, action = parked(runner, api)
    r = decide(api, action, "agent_verifies", note="the agent can look at notes.md itself")
    assert r.status_code == 200, r.content
    assert r.json()["status"] == "retrying" and r.json()["decision"] == "agent_verifies"
    nxt = Agent.claims(runner)
    c = nxt.claim
    assert c["kind"] == "agent" and c["attempt"] == 2
    reused = {e["seq"]: e for e in c["reused"]}
    assert sorted(reused) == [1, 2, 3, 4, 5]  # every model turn and tool call of the chain, failures too
    assert reused[1]["tool"] == "model" and reused[1]["result"] == {"text": "read a.md"}
    assert reused[1]["args"] == model_args({"messages": ["hi"]})
    assert reused[1]["usage"] == 120 and reused[1]["usage_detail"] == {"input_tokens": 100, "output_tokens": 20}
    assert reused[4]["ok"] is False and reused[4]["error"] == "boom" and reused[4]["tool"] == "http_get"
    assert [n["seq"] for n in c["notices"]] == [6]  # never also in reused
    notice = c["notices"][0]
    assert notice["decision"] == "agent_verifies" and notice["decided_by"] == "olive"
    assert notice["note"] == "the agent can look at notes.md itself"
    assert (notice["tool"], notice["args"]) == WRITE
    assert "outcome is unknown" in notice["text"] and "notes.md" in notice["text"]
    assert c["next_seq"] == 7
    # The agent repeats the call after checking: a new step with a new seq. The old seq keeps its notice.
    again = nxt.plan(6, *WRITE)
    assert again.status_code == 201 and again.json()["phase"] == "completed"  # the notice's step, not a new one
    assert nxt.plan(8, "file_read", {"path": "notes.md"}).status_code == 409
    nxt.call(7, *WRITE)
    assert nxt.finish(output={"summary": "notes written"}).status_code == 200
    body = api.get(f"/api/tasks/{task['id']}/").json()
    assert body["state"] == "done"
    assert RecoveryAction.objects.get(pk=action.pk).status == "resolved"
    # The run page reads as the conversation: the notice where step 6's result would be, and what it said.
    client = Client()
    client.force_login(api_user())
    page = visible_text(client.get(f"/agents/coder/runs/{nxt.run}/").text)
    assert "handed to the agent to verify by olive; the model was told: This call (file_write(" in page
    assert f"reused from run #{action.run_id} — not called again" in page


def test_performed_reaches_an_agent_as_a_notice_with_the_note_not_as_a_result(api, runner, coder):
    _, _, action = parked(runner, api)
    assert decide(api, action, "performed", note="notes.md is there, 7 bytes").status_code == 200
    c = Agent.claims(runner).claim
    assert 6 not in [e["seq"] for e in c["reused"]]
    (notice,) = c["notices"]
    assert notice["decision"] == "performed" and notice["decided_by"] == "olive"
    assert notice["note"] == "notes.md is there, 7 bytes"
    assert (
        notice["text"].startswith("A person (olive) recorded that this call (file_write(")
        and "7 bytes" in notice["text"]
    )
    run = api.get(f"/api/runs/{c['run']}/").json()
    step6 = next(s for s in run["steps"] if s["seq"] == 6)
    assert step6["carried"] == "notice" and step6["result"] is None and step6["notice"]["decision"] == "performed"


def test_not_performed_leaves_the_step_to_the_agent_to_plan_again(api, runner, coder):
    _, _, action = parked(runner, api)
    assert decide(api, action, "not_performed", accept_duplicate_risk=True).status_code == 200
    nxt = Agent.claims(runner)
    assert nxt.claim["notices"] == [] and nxt.claim["next_seq"] == 7  # the chain planned 6
    assert 6 not in [e["seq"] for e in nxt.claim["reused"]]
    assert nxt.plan(6, "file_write", {"path": "notes.md", "content": "other"}).status_code == 201


def test_agent_verifies_is_refused_for_a_scripted_plan(api, runner, agent):
    action = engine.parked(api_org(api), [engine.SAFE, engine.WRITE], 2)
    before = engine.state(action)
    r = decide(api, action, "agent_verifies")
    assert r.status_code == 400 and r.json()["code"] == "invalid"
    assert engine.state(action) == before


def api_org(api):
    from tasks.models import Organization

    return Organization.objects.get(slug="acme")


def test_the_chains_notices_stay_with_it_and_the_next_continuation_carries_them_again(api, runner, coder):
    _, _, action = parked(runner, api)
    decide(api, action, "agent_verifies")
    second = Agent.claims(runner)
    second.turn(7, {"messages": ["verify"]}, "looks fine")
    second.cut_off(8, "model", model_args({"messages": ["next"]}))  # a model turn cut off mid-call
    crash_and_supervise()  # replay mode only: resumed automatically
    third = Agent.claims(runner)
    c = third.claim
    assert [n["seq"] for n in c["notices"]] == [6] and c["notices"][0]["decision"] == "agent_verifies"
    assert sorted(e["seq"] for e in c["reused"]) == [1, 2, 3, 4, 5, 7]
    assert c["next_seq"] == 9  # the chain planned 8; the cut-off turn at 8 is the agent's to call again
    assert third.plan(8, "model", model_args({"messages": ["next"]})).status_code == 201


def test_a_forget_mode_call_cut_off_comes_back_as_a_dropped_notice(api, runner, coder):
    prompt_task(api)
    agent = Agent.claims(runner)
    agent.turn(1, {"m": 1}, "shred it")
    agent.cut_off(2, "shred", {"path": "x"})  # no declared mode: forget
    crash_and_supervise()
    c = Agent.claims(runner).claim
    (notice,) = c["notices"]
    assert notice["seq"] == 2 and notice["decision"] == "dropped" and notice["decided_by"] is None
    assert "dropped" in notice["text"] and c["next_seq"] == 3


# --- model turns cut off, and what recovery spent ---------------------------------------------------------


def test_a_model_turn_cut_off_mid_call_is_called_again_and_its_tokens_count_again(api, runner, coder):
    task = prompt_task(api)
    first = Agent.claims(runner)
    first.turn(1, {"m": 1}, "plan", tokens=(100, 20))
    first.call(2, "file_read", {"path": "a"}, usage=1)
    first.cut_off(3, "model", model_args({"m": 3}))
    crash_and_supervise()
    second = Agent.claims(runner)
    assert second.claim["next_seq"] == 4 and sorted(e["seq"] for e in second.claim["reused"]) == [1, 2]
    r = second.post("steps/", {"seq": 5, "tool": "file_read", "args": {}})
    assert r.status_code == 409 and r.json()["code"] == "seq_conflict" and r.json()["next_seq"] == 4
    second.turn(3, {"m": 3}, "done", tokens=(400, 50))  # the cut-off turn, called again
    assert second.finish(output="ok").status_code == 200
    run = api.get(f"/api/runs/{second.run}/").json()
    assert run["usage"] == {"spent": 450, "reused": 121, "spent_again": 450}
    assert api.get(f"/api/runs/{first.run}/").json()["usage"] == {"spent": 121, "reused": 0, "spent_again": 0}
    assert api.get(f"/api/tasks/{task['id']}/").json()["budget_used"] == 571
    # The run page says what recovery reused and what it spent again.
    client = Client()
    client.force_login(api_user())
    page = visible_text(client.get(f"/agents/coder/runs/{second.run}/").text)
    assert "reused 121 from earlier runs of the chain (not spent again)" in page
    assert "450 of it spent again on step 3" in page


def api_user():
    from django.contrib.auth import get_user_model

    return get_user_model().objects.get(username="olive")


def test_a_continuation_that_crashed_before_calling_again_is_continued_without_a_gap(api, runner, coder):
    prompt_task(api)
    first = Agent.claims(runner)
    first.turn(1, {"m": 1}, "go")
    first.cut_off(2, "model", model_args({"m": 2}))
    crash_and_supervise()
    Agent.claims(runner)  # claimed, then died before calling anything
    report = crash_and_supervise()
    assert report.continued and not report.opened  # no gap, nothing corrupt: resumed again
    c = Agent.claims(runner).claim
    assert c["next_seq"] == 3 and [e["seq"] for e in c["reused"]] == [1]  # step 2 still the agent's to call


# --- the agent's tell_agent setting -----------------------------------------------------------------------


def test_tell_agent_hands_every_unknown_outcome_to_the_agent_with_no_person(api, runner, coder, operator, admin_user):
    profile_update(actor=admin_user, profile=coder.profile, unknown_outcome="tell_agent", reason="it checks its files")
    task = prompt_task(api)
    first = Agent.claims(runner)
    history(first)
    first.cut_off(6, *WRITE)
    crash_and_supervise()  # one pass: the action is opened and handed over
    action = RecoveryAction.objects.get(run_id=first.run)
    assert action.status == "retrying" and action.decision == "agent_verifies" and action.decided_by == ""
    attempt = RecoveryAttempt.objects.get(action=action)
    assert attempt.decision == "agent_verifies" and attempt.requested_by == "supervisor"
    body = api.get(f"/api/actions/{action.pk}/").json()
    assert body["decided_by"] is None and body["label"] == "Handed to the agent"
    summary = " ".join(body["summary"])
    assert "Handed to the agent by its setting (unknown outcomes: tell the agent)" in summary
    assert "The model is told: “This call (file_write(" in summary and "verify the current state" in summary
    c = Agent.claims(runner).claim
    (notice,) = c["notices"]
    assert notice["decision"] == "agent_verifies" and notice["decided_by"] is None
    # The task page's card says the same.
    client = Client()
    client.force_login(operator)
    card = visible_text(outer_html(client.get(f"/tasks/{task['id']}/").text, f"action-{action.pk}"))
    assert "Handed to the agent by its setting" in card and "The model is told" in card


def test_tell_agent_does_not_touch_scripted_plans_or_a_person_who_asks(api, runner, coder, agent, admin_user):
    profile_update(actor=admin_user, profile=agent.profile, unknown_outcome="tell_agent", reason="x")
    action = engine.parked(api_org(api), [engine.SAFE, engine.WRITE], 2)  # builder's scripted plan
    supervise_once()
    action.refresh_from_db()
    assert action.status == "open" and action.decision == ""


# --- a replay that diverged -----------------------------------------------------------------------------


def test_a_diverged_replay_ends_failed_and_opens_its_action_with_both_calls(api, runner, coder, operator):
    task, second = diverge(runner, api)
    action = RecoveryAction.objects.get(run_id=second.run)
    body = api.get(f"/api/actions/{action.pk}/").json()
    assert body["kind"] == "diverged" and body["cause"] == "diverged" and body["status"] == "open"
    assert body["evidence"]["saved"] == {"tool": "file_read", "args": {"path": "a.md"}}
    assert body["evidence"]["asked"] == {"tool": "file_read", "args": {"path": "b.md"}}
    assert body["seq"] == 2 and body["due_at"] is None
    assert "Start over" in body["next_action"] and "cancel" in body["next_action"]
    assert api.get(f"/api/tasks/{task['id']}/").json()["state"] == "needs_decision"
    # Never continued by itself: not by the supervisor, not by a retry.
    runs = Run.objects.count()
    supervise_once()
    assert Run.objects.count() == runs
    retry = api.post(f"/api/actions/{action.pk}/retry/", {"version": body["version"]}, format="json")
    assert retry.status_code == 409 and retry.json()["reason"] == "diverged"
    # The card names step 2, shows both calls side by side, and offers Start over and Cancel.
    client = Client()
    client.force_login(operator)
    html = outer_html(client.get(f"/tasks/{task['id']}/").text, f"action-{action.pk}")
    card = visible_text(html)
    assert "Replay diverged at step 2" in card
    assert "At step 2 the agent asked for the same tool with other arguments" in card
    assert "Saved (what the earlier run called)" in card and "Asked now (on replay)" in card
    assert card.index("a.md") < card.index("b.md")
    assert "Start over" in card and "Cancel action" in card
    assert f'action="/tasks/{task["id"]}/start-over/"' in html


def test_start_over_from_a_diverged_action_retires_it_and_runs_the_prompt_again(api, runner, coder):
    task, second = diverge(runner, api)
    action = RecoveryAction.objects.get(run_id=second.run)
    r = api.post(f"/api/tasks/{task['id']}/start-over/", {}, format="json")
    assert r.status_code == 202, r.content
    fresh = Run.objects.get(pk=r.json()["run"])
    assert fresh.kind == "agent" and fresh.continues_id is None and fresh.input == {"prompt": "Write the report"}
    assert RecoveryAction.objects.get(pk=action.pk).status == "retired"
    c = Agent.claims(runner).claim
    assert c["run"] == fresh.pk and c["reused"] == [] and c["next_seq"] == 1


def test_cancel_closes_a_diverged_action(api, runner, coder):
    _, second = diverge(runner, api)
    action = RecoveryAction.objects.get(run_id=second.run)
    version = api.get(f"/api/actions/{action.pk}/").json()["version"]
    r = api.post(f"/api/actions/{action.pk}/cancel/", {"version": version}, format="json")
    assert r.status_code == 200 and r.json()["status"] == "cancelled"


# --- the catalogue and "the tool is no longer available" ---------------------------------------------------


def test_a_tool_the_agent_no_longer_registers_makes_recovery_unavailable(api, runner, coder):
    tools = [{"name": "search", "mode": "replay"}, {"name": "answer", "mode": "notify"}]
    assert runner.post("/api/runner/agents/coder/tools/", {"tools": tools}, format="json").status_code == 200
    prompt_task(api)
    agent = Agent.claims(runner)
    agent.call(1, "search", {"q": "a"})
    agent.cut_off(2, "search", {"q": "b"})  # replay mode: would run again
    runner.post("/api/runner/agents/coder/tools/", {"tools": tools[1:]}, format="json")
    crash_and_supervise()
    action = RecoveryAction.objects.get(run_id=agent.run)
    assert action.cause == "tool_unknown"
    assert action.evidence["reasons"][0]["detail"].startswith("Step 2 calls search")


def test_a_tool_the_catalogue_still_has_is_replayed_and_a_built_in_one_too_without_a_catalogue(api, runner, coder):
    assert runner.post("/api/runner/agents/coder/tools/", {"tools": [{"name": "search", "mode": "replay"}]},
                       format="json").status_code == 200  # fmt: skip
    prompt_task(api)
    agent = Agent.claims(runner)
    agent.call(1, "search", {"q": "a"})
    agent.cut_off(2, "search", {"q": "b"})
    report = crash_and_supervise()
    assert report.continued and not report.opened
    assert Step.objects.filter(run_id=agent.run, seq=2).get().recovery_mode == "replay"


def test_scripted_plans_keep_their_built_in_tools(api, runner, agent):
    task = create_task(api, steps=plan(("file_read", {"path": "a"}), ("sleep", {"seconds": 0})))
    c = claim(runner)
    assert c["kind"] == "plan" and c["next_seq"] == 1
    assert c["run"] == task["current_run"]


def test_only_an_agent_runs_card_offers_to_let_the_agent_verify(api, runner, coder, agent, operator):
    task, _, action = parked(runner, api)
    scripted = engine.parked(api_org(api), [engine.SAFE, engine.WRITE], 2)
    client = Client()
    client.force_login(operator)
    card = visible_text(outer_html(client.get(f"/tasks/{task['id']}/").text, f"action-{action.pk}"))
    assert "The agent verifies" in card and "It happened — keep it" in card
    page = client.get(f"/tasks/{scripted.task_id}/").text
    other = visible_text(outer_html(page, f"action-{scripted.pk}"))
    assert "It happened — keep it" in other and "The agent verifies" not in other


def test_the_task_page_and_the_run_page_show_the_prompt_and_what_the_agent_returned(api, runner, coder, operator):
    task = prompt_task(api, "Summarise the incident")
    agent = Agent.claims(runner)
    agent.turn(1, {"m": 1}, "summary")
    assert agent.finish(output={"summary": "disk full on db-2"}).status_code == 200
    body = api.get(f"/api/tasks/{task['id']}/").json()
    assert body["kind"] == "agent" and body["output"] == {"summary": "disk full on db-2"}
    client = Client()
    client.force_login(operator)
    for url, prompt in ((f"/tasks/{task['id']}/", "Prompt: "), (f"/agents/coder/runs/{agent.run}/", "Prompt ")):
        page = visible_text(client.get(url).text)
        assert f"{prompt}Summarise the incident" in page
        assert f"What the agent returned in run #{agent.run}" in page and "disk full on db-2" in page
