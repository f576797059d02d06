"""Recovery-mode settings: guard rails, concurrent saves, the history, and runs planned before a change."""

import pytest

from recovery.models import RecoveryAction
from recovery.modes import REPLAY_RISK, Change, ConfirmationRequired, changes_of, profile_changes, profile_update
from recovery.selectors import diagnose, profile_history
from recovery.supervisor.loop import supervise_once
from tasks.errors import Invalid, StaleVersion
from tasks.models import AgentProfile, Event, Run, Step
from tests.factories import make_agent, make_member
from tests.recovery.engine import POST, SAFE, crash_after_dispatch, first_run, latest_run, start

pytestmark = pytest.mark.django_db


@pytest.fixture
def ada(org):
    return make_member(org, "ada", "admin")


def profile_of(agent) -> AgentProfile:
    return AgentProfile.objects.get(agent=agent)


def settings_events() -> list[Event]:
    return list(Event.objects.filter(kind="profile_updated").order_by("id"))


# --- pure decisions -----------------------------------------------------------------------


def test_only_a_notify_tool_moving_to_replay_needs_confirmation():
    assert Change("http_post", "notify", "replay").needs_confirmation
    assert Change("file_write", "forget", "replay").needs_confirmation  # its default is notify
    assert not Change("http_post", "notify", "forget").needs_confirmation
    assert not Change("file_read", "notify", "replay").needs_confirmation  # back to its own default
    assert not Change("shred", "forget", "replay").needs_confirmation  # undeclared: default forget
    assert not Change(None, True, False).needs_confirmation
    assert Change(None, True, False).needs_reason and Change("http_post", "notify", "replay").needs_reason
    assert not Change("file_read", "replay", "notify").needs_reason
    assert Change("http_post", "notify", "replay").text == "http_post: notify → replay"
    assert Change(None, True, False).text == "auto-resume: on → off"


def test_a_setting_the_person_left_alone_is_not_a_change_and_a_moved_one_they_changed_collides():
    saved = {"bash": "replay"}  # someone else moved bash after the form was drawn
    expected = {"bash": "notify", "file_read": "replay", "auto_resume": True}
    changes, collisions = profile_changes(
        overrides=saved,
        auto_resume=True,
        modes={"bash": "notify", "file_read": "notify"},
        auto_resume_to=True,
        expected=expected,
    )
    assert changes == [Change("file_read", "replay", "notify")] and collisions == []
    changes, collisions = profile_changes(
        overrides=saved, auto_resume=True, modes={"bash": "forget"}, expected=expected
    )
    assert changes == [] and collisions == ["bash"]


def test_events_written_before_per_change_payloads_still_read_as_changes():
    legacy = {
        "agent": "builder",
        "before": {"tool_modes": {}, "auto_resume": True},
        "after": {"tool_modes": {"file_read": "notify"}, "auto_resume": False},
    }
    assert changes_of(legacy) == [Change("file_read", "replay", "notify"), Change(None, True, False)]


# --- the service --------------------------------------------------------------------------


def test_moving_a_notify_tool_to_replay_needs_the_risk_accepted_and_a_reason(org, agent, ada):
    with pytest.raises(ConfirmationRequired) as refused:
        profile_update(actor=ada, profile=agent.profile, modes={"http_post": "replay"})
    assert refused.value.tools == ["http_post"] and refused.value.reason_required
    assert REPLAY_RISK in refused.value.detail and refused.value.code == "confirmation_required"
    with pytest.raises(ConfirmationRequired) as refused:
        profile_update(actor=ada, profile=agent.profile, modes={"http_post": "replay"}, reason="idempotent hook")
    assert refused.value.tools == ["http_post"] and not refused.value.reason_required
    with pytest.raises(ConfirmationRequired) as refused:
        profile_update(actor=ada, profile=agent.profile, modes={"http_post": "replay"}, confirm_replay=["http_post"])
    assert refused.value.tools == [] and refused.value.reason_required
    assert profile_of(agent).tool_modes == {} and settings_events() == []

    saved = profile_update(
        actor=ada,
        profile=agent.profile,
        modes={"http_post": "replay", "file_read": "notify"},
        confirm_replay=["http_post"],
        reason="the hook dedupes on its request id",
    )
    assert saved.text == "file_read: replay → notify; http_post: notify → replay"
    assert profile_of(agent).tool_modes == {"http_post": "replay", "file_read": "notify"}
    [event] = settings_events()
    assert event.actor == "ada" and event.payload["agent"] == "builder"
    assert event.payload["reason"] == "the hook dedupes on its request id"
    assert event.payload["changes"] == [
        {"setting": "tool_mode", "tool": "file_read", "from": "replay", "to": "notify"},
        {"setting": "tool_mode", "tool": "http_post", "from": "notify", "to": "replay"},
    ]


def test_a_reset_removes_the_override_and_saving_the_same_settings_records_nothing(org, agent, ada):
    profile_update(actor=ada, profile=agent.profile, modes={"bash": "forget"})
    assert profile_of(agent).tool_modes == {"bash": "forget"}
    saved = profile_update(actor=ada, profile=agent.profile, modes={"bash": "notify"})
    assert saved.text == "bash: forget → notify" and profile_of(agent).tool_modes == {}
    nothing = profile_update(actor=ada, profile=agent.profile, modes={"bash": "notify"}, auto_resume=True)
    assert nothing.changes == [] and len(settings_events()) == 2


def test_switching_auto_resume_needs_a_reason_and_is_recorded(org, agent, ada):
    with pytest.raises(ConfirmationRequired) as refused:
        profile_update(actor=ada, profile=agent.profile, auto_resume=False)
    assert refused.value.tools == [] and refused.value.reason_required
    profile_update(actor=ada, profile=agent.profile, auto_resume=False, reason="migrating the workers")
    assert profile_of(agent).auto_resume is False
    [event] = settings_events()
    assert event.payload["changes"] == [{"setting": "auto_resume", "from": True, "to": False}]


def test_a_change_saved_meanwhile_is_neither_overwritten_nor_silently_lost(org, agent, ada):
    bob = make_member(org, "bob", "admin")
    drawn = {"bash": "notify", "file_read": "replay", "auto_resume": True}
    profile_update(actor=bob, profile=agent.profile, modes={"bash": "forget"})
    # Ada's form still shows bash as notify; she changed only file_read: bob's bash stays.
    profile_update(actor=ada, profile=agent.profile, modes={"bash": "notify", "file_read": "notify"}, expected=drawn)
    assert profile_of(agent).tool_modes == {"bash": "forget", "file_read": "notify"}
    # Had she changed bash too, her save is refused and says what is saved now.
    with pytest.raises(StaleVersion) as refused:
        profile_update(actor=ada, profile=agent.profile, modes={"bash": "replay"}, expected=drawn)
    assert "bash is now forget" in refused.value.detail
    assert profile_of(agent).tool_modes == {"bash": "forget", "file_read": "notify"}


def test_unknown_modes_and_tool_names_are_refused(org, agent, ada):
    with pytest.raises(Invalid):
        profile_update(actor=ada, profile=agent.profile, modes={"file_read": "sometimes"})
    with pytest.raises(Invalid):
        profile_update(actor=ada, profile=agent.profile, modes={"<script>": "replay"})
    with pytest.raises(Invalid):
        profile_update(actor=ada, profile=agent.profile, modes={"bash": "forget"}, reason="x" * 1001)
    assert settings_events() == []


def test_the_history_lists_each_change_newest_first_per_agent(org, agent, ada):
    other = make_agent(org, "careful")
    profile_update(
        actor=ada, profile=agent.profile, modes={"http_post": "replay"}, confirm_replay=["http_post"], reason="dedup"
    )
    profile_update(actor=ada, profile=other.profile, auto_resume=False, reason="manual only")
    profile_update(actor=ada, profile=agent.profile, modes={"bash": "forget", "fetch": "notify"})
    history = profile_history(org.pk)
    assert [h.change.text for h in history["builder"]] == [
        "bash: notify → forget",
        "fetch: replay → notify",
        "http_post: notify → replay",
    ]
    assert history["builder"][2].reason == "dedup" and history["builder"][2].actor == "ada"
    assert [h.change.text for h in history["careful"]] == ["auto-resume: on → off"]
    assert list(profile_history(org.pk, ["careful"])) == ["careful"]


# --- a change applies to steps planned after it ----------------------------------------------


def test_a_run_planned_before_a_change_keeps_its_mode_and_one_planned_after_takes_the_new_one(org, agent, ada):
    before = crash_after_dispatch(first_run(start(org, [SAFE, POST], title="before")), 2)
    assert Step.objects.get(run=before, seq=2).recovery_mode == "notify"

    profile_update(
        actor=ada,
        profile=agent.profile,
        modes={"http_post": "replay"},
        confirm_replay=["http_post"],
        reason="the hook dedupes on its request id",
    )
    after_task = start(org, [SAFE, POST], title="after")
    after = crash_after_dispatch(first_run(after_task), 2)
    assert Step.objects.get(run=after, seq=2).recovery_mode == "replay"

    # Classification reads each step's saved mode, not the profile.
    assert {s.seq: s.verdict for s in diagnose(before).steps}[2] == "unknown_outcome"
    assert {s.seq: s.verdict for s in diagnose(after).steps}[2] == "replay"
    supervise_once()
    action = RecoveryAction.objects.get(run=before)
    assert action.kind == "unknown_outcome" and action.status == "open"
    assert not RecoveryAction.objects.filter(run=after).exists()
    continuation = latest_run(after_task)
    assert continuation.pk != after.pk and continuation.continues_id == after.pk
    assert Run.objects.filter(task=before.task).count() == 1  # nothing replayed the call of unknown outcome
