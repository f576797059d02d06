"""The tool-settings page, its per-agent forms, the settings API, the styled refusal, and the run card's mode note."""

import html
import re

import pytest

from recovery.modes import REPLAY_RISK, profile_update
from tasks.models import AgentProfile, Event
from tasks.modes import KNOWN_TOOLS, mode_for
from tests.factories import make_agent, make_member
from tests.recovery.engine import POST, SAFE, crash_after_dispatch, first_run, start

pytestmark = pytest.mark.django_db

HX = {"HX-Request": "true"}


def text_of(response) -> str:
    """The visible words of a response, whitespace collapsed, entities decoded."""
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", response.content.decode()))).strip()


def form_of(agent, **changes) -> dict:
    """One agent's form as a browser sends it: every select and what it showed as saved, the switch."""
    profile = AgentProfile.objects.get(agent=agent)
    data = {}
    for tool in KNOWN_TOOLS:
        saved = mode_for(tool, profile.tool_modes)
        data[f"was:{tool}"] = saved
        data[f"mode:{tool}"] = changes.pop(tool, saved)
    data["was_auto_resume"] = "1" if profile.auto_resume else "0"
    auto = changes.pop("auto_resume", profile.auto_resume)
    if auto:
        data["auto_resume"] = "1"
    data.update(changes)
    return data


def section(response, agent) -> str:
    """One agent's section of the page."""
    chunks = response.content.decode().split('<details class="card profile')
    found = [c for c in chunks if f'id="profile-{agent.pk}"' in c.split(">", 1)[0]]
    assert found, f"no section of {agent}"
    return found[0]


@pytest.fixture
def careful(org):
    return make_agent(org, "careful")


# --- refusals ---------------------------------------------------------------------------


def test_operators_and_viewers_get_the_styled_refusal_page_with_the_reason_and_a_way_back(
    login, org, agent, operator, viewer, admin_user
):
    for user, role in ((operator, "operator"), (viewer, "viewer")):
        client = login(user)
        response = client.get("/settings/tools/", headers={"Referer": "http://testserver/inbox/"})
        assert response.status_code == 403
        page = response.content.decode()
        assert '<header class="top">' in page and "console.css" in page  # the console's own page
        words = text_of(response)
        assert f"Tool settings need the admin role; you are {role} in Acme." in words
        assert "Who can help: ada — admin of Acme." in words
        assert 'href="http://testserver/inbox/"' in page and 'href="/"' in page
        assert (
            client.post("/settings/tools/builder/", form_of(agent, file_read="notify"), headers=HX).status_code == 403
        )
        assert client.get("/api/agents/builder/settings/").status_code == 403
    assert AgentProfile.objects.get(agent=agent).tool_modes == {}


def test_a_plain_form_post_refused_for_a_role_is_the_styled_page(login, org, agent, viewer):
    from tests.console.scenarios import unknown_outcome_action

    action = unknown_outcome_action(org)
    response = login(viewer).post(f"/actions/{action.pk}/decision/", {"version": 1, "outcome": "performed"})
    assert response.status_code == 403
    assert '<header class="top">' in response.content.decode() and "Not allowed" in text_of(response)
    assert "operator" in text_of(response)


def test_a_form_without_its_security_token_is_the_styled_page(login, org, agent, admin_user):
    response = login(admin_user, csrf=True).post("/settings/tools/builder/", form_of(agent, file_read="notify"))
    assert response.status_code == 403
    assert '<header class="top">' in response.content.decode() and "security token" in text_of(response)
    assert AgentProfile.objects.get(agent=agent).tool_modes == {}


# --- the page -----------------------------------------------------------------------------


def test_the_page_sets_overrides_apart_and_shows_each_agents_switch_and_history(login, org, agent, careful, admin_user):
    profile_update(
        actor=admin_user,
        profile=agent.profile,
        modes={"http_post": "replay"},
        confirm_replay=["http_post"],
        reason="the hook dedupes",
    )
    profile_update(actor=admin_user, profile=careful.profile, auto_resume=False, reason="manual only")
    response = login(admin_user).get("/settings/tools/")
    assert response.status_code == 200
    builder = section(response, agent)
    overrides, defaults = builder.split('<details class="defaults"')
    assert 'name="mode:http_post"' in overrides and "Reset to notify" in overrides
    assert 'name="mode:file_read"' not in overrides and 'name="mode:file_read"' in defaults
    assert "1 override" in builder and "auto-resume on" in builder
    assert "http_post: notify → replay" in builder and "the hook dedupes" in builder
    other = section(response, careful)
    assert "all defaults" in other and "auto-resume off" in other and "manual only" in other
    assert 'name="auto_resume" value="1" data-saved="0">' in other
    assert "<time datetime=" in builder  # when: relative text in <time>


def test_the_page_does_not_grow_in_queries_with_agents(login, org, admin_user, django_assert_max_num_queries):
    client = login(admin_user)
    for n in (2, 30):
        for i in range(n):
            agent = make_agent(org, f"agent-{i:02d}")
            profile_update(actor=admin_user, profile=agent.profile, modes={"bash": "forget"})
        with django_assert_max_num_queries(8):
            response = client.get("/settings/tools/")
        assert response.text.count('class="card profile') == n


# --- saving -------------------------------------------------------------------------------


def test_a_save_swaps_only_its_agents_section_and_says_exactly_what_changed(login, org, agent, careful, admin_user):
    response = login(admin_user).post(
        "/settings/tools/builder/", form_of(agent, file_read="notify", bash="forget"), headers=HX
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert body.strip().startswith(f'<details class="card profile" id="profile-{agent.pk}"')
    assert f"profile-{careful.pk}" not in body and "<html" not in body
    assert "Saved builder: bash: notify → forget; file_read: replay → notify." in text_of(response)
    assert AgentProfile.objects.get(agent=agent).tool_modes == {"bash": "forget", "file_read": "notify"}
    assert AgentProfile.objects.get(agent=careful).tool_modes == {}
    assert 'class="history-item"' in body


def test_moving_http_post_to_replay_asks_to_confirm_what_it_means_and_keeps_the_reason(login, org, agent, admin_user):
    client = login(admin_user)
    asked = client.post("/settings/tools/builder/", form_of(agent, http_post="replay", fetch="notify"), headers=HX)
    assert asked.status_code == 409
    words = text_of(asked)
    assert f"http_post → replay: its default is notify. With replay, {REPLAY_RISK}." in words
    assert 'name="confirm_replay" value="http_post" required' in asked.content.decode()
    assert "Confirm and save builder" in words
    # What the person chose is still chosen, and marked unsaved; nothing was stored.
    page = asked.content.decode()
    assert re.search(r'name="mode:http_post"[^>]*>.*?<option value="replay" selected>', page, re.S)
    assert re.search(r'name="mode:fetch"[^>]*>.*?<option value="notify" selected>', page, re.S)
    assert AgentProfile.objects.get(agent=agent).tool_modes == {}
    assert not Event.objects.filter(kind="profile_updated").exists()

    no_reason = client.post(
        "/settings/tools/builder/", form_of(agent, http_post="replay", confirm_replay="http_post"), headers=HX
    )
    assert no_reason.status_code == 409 and "Say why in the reason" in text_of(no_reason)

    saved = client.post(
        "/settings/tools/builder/",
        form_of(agent, http_post="replay", fetch="notify", confirm_replay="http_post", reason="the hook dedupes"),
        headers=HX,
    )
    assert saved.status_code == 200
    assert "Saved builder: fetch: replay → notify; http_post: notify → replay." in text_of(saved)
    assert AgentProfile.objects.get(agent=agent).tool_modes == {"http_post": "replay", "fetch": "notify"}
    history = section(login(admin_user).get("/settings/tools/"), agent).split('class="history"')[1]
    assert "http_post: notify → replay" in history and "“the hook dedupes”" in history and "by ada" in history


def test_auto_resume_is_switched_here_with_a_reason_in_the_history(login, org, agent, admin_user):
    client = login(admin_user)
    asked = client.post("/settings/tools/builder/", form_of(agent, auto_resume=False), headers=HX)
    assert asked.status_code == 409 and "Say why in the reason" in text_of(asked)
    assert AgentProfile.objects.get(agent=agent).auto_resume is True
    saved = client.post(
        "/settings/tools/builder/", form_of(agent, auto_resume=False, reason="moving workers"), headers=HX
    )
    assert saved.status_code == 200 and "Saved builder: auto-resume: on → off." in text_of(saved)
    assert AgentProfile.objects.get(agent=agent).auto_resume is False
    assert "“moving workers”" in saved.content.decode()


def test_a_reset_touches_only_its_tool_and_keeps_the_forms_other_unsaved_choices(login, org, agent, admin_user):
    profile_update(actor=admin_user, profile=agent.profile, modes={"bash": "forget"})
    response = login(admin_user).post(
        "/settings/tools/builder/", form_of(agent, file_read="notify", reset="bash"), headers=HX
    )
    assert response.status_code == 200
    assert "Saved builder: bash: forget → notify." in text_of(response)
    assert AgentProfile.objects.get(agent=agent).tool_modes == {}
    page = response.content.decode()
    assert re.search(
        r'<tr class="mode-row is-dirty" data-tool="file_read">.*?<option value="notify" selected>', page, re.S
    )


def test_a_save_refused_because_of_a_concurrent_change_keeps_the_persons_choices(login, org, agent, admin_user):
    drawn = form_of(agent, bash="replay", confirm_replay="bash", reason="retry-safe script")
    bob = make_member(org, "bob", "admin")
    profile_update(actor=bob, profile=agent.profile, modes={"bash": "forget"})
    response = login(admin_user).post("/settings/tools/builder/", drawn, headers=HX)
    assert response.status_code == 409
    assert "bash is now forget" in text_of(response)
    assert re.search(r'name="mode:bash"[^>]*>.*?<option value="replay" selected>', response.content.decode(), re.S)
    assert AgentProfile.objects.get(agent=agent).tool_modes == {"bash": "forget"}


def test_without_javascript_a_save_redirects_to_the_page_that_says_what_changed(login, org, agent, admin_user):
    client = login(admin_user)
    response = client.post("/settings/tools/builder/", form_of(agent, file_read="notify"))
    assert response.status_code == 302
    assert response["Location"] == f"/settings/tools/?agent=builder#profile-{agent.pk}"
    page = client.get(response["Location"])
    assert "Saved builder: file_read: replay → notify." in text_of(page)
    refused = client.post("/settings/tools/builder/", form_of(agent, http_post="replay"))
    assert refused.status_code == 409 and "<html" in refused.content.decode()
    assert REPLAY_RISK in text_of(refused)


def test_another_organizations_agent_is_not_found(login, org, agent, admin_user, other_org):
    make_agent(other_org, "theirs")
    client = login(admin_user)
    assert client.post("/settings/tools/theirs/", {"mode:bash": "forget"}, headers=HX).status_code == 404
    assert client.get("/api/agents/theirs/settings/").status_code == 404


# --- the API ------------------------------------------------------------------------------


def test_the_settings_api_gives_modes_switch_and_history(login, org, agent, admin_user, operator, other_org):
    profile_update(
        actor=admin_user,
        profile=agent.profile,
        modes={"http_post": "replay"},
        confirm_replay=["http_post"],
        reason="the hook dedupes",
    )
    profile_update(actor=admin_user, profile=agent.profile, auto_resume=False, reason="manual for now")
    response = login(admin_user).get("/api/agents/builder/settings/")
    assert response.status_code == 200
    data = response.json()
    assert data["agent"] == "builder" and data["auto_resume"] is False
    tools = {t["tool"]: t for t in data["tools"]}
    assert set(tools) == set(KNOWN_TOOLS)
    assert tools["http_post"] == {"tool": "http_post", "default": "notify", "mode": "replay"}
    assert tools["file_read"] == {"tool": "file_read", "default": "replay", "mode": "replay"}
    first, second = data["history"]
    assert first["actor"] == "ada" and first["from"] is True and first["to"] is False
    assert "tool" not in first and first["setting"] == "auto_resume" and first["reason"] == "manual for now"
    assert second == {
        "actor": "ada",
        "at": second["at"],
        "setting": "tool_mode",
        "tool": "http_post",
        "from": "notify",
        "to": "replay",
        "reason": "the hook dedupes",
    }
    assert re.match(r"\d{4}-\d\d-\d\dT", second["at"])

    refused = login(operator).get("/api/agents/builder/settings/")
    assert refused.status_code == 403 and refused.json()["code"] == "forbidden"
    assert login(admin_user).get("/api/agents/nobody/settings/").json()["code"] == "not_found"
    schema = login(admin_user).get("/api/schema/").json()
    assert "/api/agents/{name}/settings/" in schema["paths"]


# --- runs planned before a change -----------------------------------------------------------


def test_the_run_card_says_which_mode_a_step_was_planned_with_when_the_agent_changed_since(
    login, org, agent, admin_user
):
    run = crash_after_dispatch(first_run(start(org, [SAFE, POST], title="hook")), 2)
    client = login(admin_user)
    page = client.get(f"/agents/builder/runs/{run.pk}/").content.decode()
    assert "planned as" not in page
    profile_update(
        actor=admin_user, profile=agent.profile, modes={"http_post": "replay"}, confirm_replay=["http_post"], reason="x"
    )
    for url in (f"/agents/builder/runs/{run.pk}/", f"/tasks/{run.task_id}/"):
        page = client.get(url).content.decode()
        assert page.count("planned as notify · now replay") == 1, url


# --- agent runs: the registered catalogue and who settles an unknown outcome (DESIGN §13) ----------------------


def test_the_page_lists_the_tools_an_agents_worker_registered_with_their_descriptions(
    login, org, agent, admin_user, runner
):
    tools = [
        {"name": "search_docs", "mode": "replay", "description": "Search the product docs"},
        {"name": "send_mail", "mode": "notify", "description": "Send an email to a customer"},
    ]
    assert runner.post("/api/runner/agents/builder/tools/", {"tools": tools}, format="json").status_code == 200
    client = login(admin_user)
    mine = section(client.get("/settings/tools/?agent=builder"), agent)
    words = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", mine)))
    assert "2 tools registered by its worker" in words
    assert "search_docs Search the product docs" in words and "send_mail Send an email to a customer" in words
    assert 'name="mode:file_write"' not in mine  # the built-in list no longer applies to this agent
    assert 'name="mode:send_mail"' in mine and "notify (default)" in mine


def test_an_admin_switches_unknown_outcomes_to_tell_the_agent_with_a_reason_and_the_history_says_so(
    login, org, agent, admin_user
):
    client = login(admin_user)
    data = form_of(agent, unknown_outcome="tell_agent", was_unknown_outcome="ask_person")
    refused = client.post("/settings/tools/builder/", data, headers=HX)
    assert refused.status_code == 409 and "Say why in the reason" in text_of(refused)
    assert AgentProfile.objects.get(agent=agent).unknown_outcome == "ask_person"
    saved = client.post("/settings/tools/builder/", {**data, "reason": "its runs check their own files"}, headers=HX)
    assert saved.status_code == 200
    assert "unknown outcomes of agent runs: ask a person → tell the agent" in text_of(saved)
    assert AgentProfile.objects.get(agent=agent).unknown_outcome == "tell_agent"
    event = Event.objects.filter(kind="profile_updated").order_by("-id").first()
    assert event.payload["changes"] == [{"setting": "unknown_outcome", "from": "ask_person", "to": "tell_agent"}]
    body = client.get("/api/agents/builder/settings/").json()
    assert body["unknown_outcome"] == "tell_agent"
    assert body["history"][0]["setting"] == "unknown_outcome" and body["history"][0]["to"] == "tell_agent"


def test_a_model_turns_mode_cannot_be_overridden(org, agent, admin_user):
    from tasks.errors import Invalid

    with pytest.raises(Invalid):
        profile_update(actor=admin_user, profile=agent.profile, modes={"model": "notify"}, reason="no")
