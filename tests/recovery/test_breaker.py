"""The recovery breaker (DESIGN §14): the pure rule, then the supervisor's count, hold, trial and close."""

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from recovery.actions import breakers
from recovery.models import RecoveryBreaker, RecoveryFailure
from recovery.rules import breaker as rule
from recovery.supervisor.loop import supervise_once
from tasks.errors import Forbidden, GateClosed, Invalid, NotFound
from tasks.models import Event, Run
from tests.factories import make_agent, make_member
from tests.recovery import engine as e

T0 = datetime(2026, 1, 1, tzinfo=UTC)

# --- the pure rule -----------------------------------------------------------------------------


def test_the_breaker_trips_on_more_than_the_threshold_never_at_it():
    assert not rule.trips(tasks_in_window=10, threshold=10)
    assert rule.trips(tasks_in_window=11, threshold=10)
    assert not rule.trips(tasks_in_window=0, threshold=0) and rule.trips(tasks_in_window=1, threshold=0)


def test_the_signature_is_the_tool_in_flight_and_the_runs_error_code_else_the_cause():
    steps = [
        rule.StepFailure(1, "fetch", "completed"),
        rule.StepFailure(2, "bash", "failed"),
        rule.StepFailure(3, "http_post", "dispatched"),
        rule.StepFailure(4, "sleep", "dispatched", parent_seq=3),
    ]
    assert rule.failure_tool(steps) == "http_post"
    assert rule.failure_tool(steps[:2]) == "bash"
    assert rule.failure_tool(steps[:1], named_seq=1) == "fetch"
    assert rule.failure_tool([]) == ""
    assert rule.failure_signature(tool="http_post", error_code="lease_lapsed", cause="unknown_outcome") == (
        "http_post / lease_lapsed"
    )
    assert rule.failure_signature(tool="http_post", error_code="", cause="unknown_outcome") == (
        "http_post / unknown_outcome"
    )
    assert rule.failure_signature(tool="", error_code="", cause="checkpoint_purged") == "checkpoint_purged"


def test_cool_off_and_the_trial_decide_the_next_state():
    assert not rule.cooled(opened_at=T0, now=T0 + timedelta(seconds=899), cooloff_seconds=900)
    assert rule.cooled(opened_at=T0, now=T0 + timedelta(seconds=900), cooloff_seconds=900)
    assert rule.after_probe("succeeded") == rule.CLOSED
    for ended in ("failed", "interrupted", "stopped", "cancelled"):
        assert rule.after_probe(ended) == rule.OPEN
    for live in ("queued", "running", None):
        assert rule.after_probe(live) is None


def test_automatic_admission_lets_one_trial_through_only_when_every_breaker_is_half_open():
    assert rule.automatic_admission(states=[], probe_taken=False) == "go"
    assert rule.automatic_admission(states=["open"], probe_taken=False) == "hold"
    assert rule.automatic_admission(states=["half_open"], probe_taken=False) == "probe"
    assert rule.automatic_admission(states=["half_open"], probe_taken=True) == "hold"
    assert rule.automatic_admission(states=["half_open", "open"], probe_taken=False) == "hold"


def test_the_sentence_names_agent_tool_code_count_and_span():
    said = rule.breaker_sentence(
        agent="coder", signature="http_post / connection refused", tasks=14, span_seconds=372, state="open"
    )
    assert (
        said
        == "Automatic recovery paused for coder: 14 tasks failed with `http_post` / `connection refused` in 6 minutes."
    )
    half = rule.breaker_sentence(agent="coder", signature="lease_lapsed", tasks=1, span_seconds=5, state="half_open")
    assert half == (
        "Automatic recovery paused for coder: 1 task failed with `lease_lapsed` in under a minute; "
        "one trial continuation may run now."
    )


# --- through the supervisor --------------------------------------------------------------------

SAFE3 = [e.SAFE, e.SAFE, e.SAFE]


@pytest.fixture
def limits(settings):
    settings.CONSOLE_BREAKER_TASKS = 3
    settings.CONSOLE_BREAKER_WINDOW_SECONDS = 600
    settings.CONSOLE_BREAKER_COOLOFF_SECONDS = 900
    return settings


def storm(org, n: int, agent: str = "builder") -> list[Run]:
    return [e.interrupted(org, SAFE3, 2, agent=agent, title=f"{agent} {i}") for i in range(n)]


def finish_continuations(runs: list[Run]) -> None:
    """The continuations queued for `runs` run to the end (so the claim hands out what comes after them)."""
    for r in runs:
        e.run_to_end(Run.objects.get(continues=r))


def continued(runs: list[Run]) -> list[Run]:
    return [r for r in runs if Run.objects.filter(continues=r).exists()]


@pytest.mark.django_db
def test_more_than_n_tasks_failing_alike_open_one_breaker_that_holds_the_rest_and_not_another_agent(org, agent, limits):
    make_agent(org, "other")
    runs = storm(org, 6)
    bystander = e.interrupted(org, SAFE3, 2, agent="other")

    report = supervise_once()

    # The first three were continued before it tripped; the fourth trips it; none after is continued.
    assert continued(runs) == runs[:3]
    assert report.held == [r.pk for r in runs[3:]]
    (b,) = RecoveryBreaker.objects.all()
    assert (b.state, b.agent.name, b.signature, b.tool, b.tasks) == (
        "open",
        "builder",
        "sleep / lease_lapsed",
        "sleep",
        6,  # the fourth tripped it; the fifth and sixth, held, count into it
    )
    assert Run.objects.filter(continues=bystander).exists(), "another agent is untouched"
    opened = Event.objects.get(kind="breaker_opened")
    assert opened.task_id is None and opened.payload["breaker"] == b.pk and opened.payload["tasks"] == 4

    # Held runs are looked at again each pass, counted once, and still not continued.
    before = Run.objects.count()
    again = supervise_once()
    assert again.held == [r.pk for r in runs[3:]] and Run.objects.count() == before
    assert RecoveryFailure.objects.filter(agent=b.agent).count() == 6
    b.refresh_from_db()
    assert b.tasks == 6


@pytest.mark.django_db
def test_a_person_continuing_a_held_task_is_refused_by_the_breaker_gate(org, agent, limits, operator):
    from recovery.actions import controls

    runs = storm(org, 4)
    supervise_once()
    with pytest.raises(GateClosed) as refused:
        controls.task_continue(user=operator, task_id=runs[3].task_id)
    assert refused.value.gate == "breaker_open"
    assert "Automatic recovery paused for builder: 4 tasks failed with `sleep` / `lease_lapsed`" in str(
        refused.value.detail
    )


@pytest.mark.django_db
def test_an_admin_closes_it_with_a_reason_and_the_next_pass_continues_what_it_held(org, agent, limits, admin_user):
    runs = storm(org, 5)
    supervise_once()
    b = RecoveryBreaker.objects.get()
    with pytest.raises(Invalid):
        breakers.breaker_close(user=admin_user, breaker_id=b.pk, reason="  ")
    closed = breakers.breaker_close(user=admin_user, breaker_id=b.pk, reason="provider is back")
    assert (closed.state, closed.closed_by, closed.reason) == ("closed", "ada", "provider is back")
    assert Event.objects.filter(kind="breaker_closed", actor="ada").count() == 1

    report = supervise_once()
    assert sorted(report.continued) == sorted(Run.objects.filter(continues__in=runs[3:]).values_list("pk", flat=True))
    assert continued(runs) == runs


@pytest.mark.django_db
def test_only_admins_of_its_organization_close_it(org, other_org, agent, limits, operator, viewer):
    storm(org, 4)
    supervise_once()
    b = RecoveryBreaker.objects.get()
    for person in (operator, viewer):
        with pytest.raises(Forbidden):
            breakers.breaker_close(user=person, breaker_id=b.pk, reason="r")
    stranger = make_member(other_org, "sam", "admin")
    with pytest.raises(NotFound):
        breakers.breaker_close(user=stranger, breaker_id=b.pk, reason="r")
    assert RecoveryBreaker.objects.get().state == "open"


@pytest.mark.django_db
def test_after_its_cool_off_it_half_opens_one_trial_whose_success_closes_it(org, agent, limits):
    runs = storm(org, 6)
    supervise_once()
    finish_continuations(runs[:3])
    b = RecoveryBreaker.objects.get()
    limits.CONSOLE_BREAKER_COOLOFF_SECONDS = 0

    report = supervise_once()
    assert report.breakers["half_open"] == [b.pk]
    # One trial continuation, of the first held run; the others stay held.
    (trial,) = [Run.objects.get(continues=r) for r in continued(runs[3:])]
    assert trial.continues_id == runs[3].pk
    assert report.held == [r.pk for r in runs[4:]]
    b.refresh_from_db()
    assert (b.state, b.probe_run_id) == ("half_open", trial.pk)

    e.run_to_end(trial)
    report = supervise_once()
    assert report.breakers["closed"] == [b.pk]
    b.refresh_from_db()
    assert (b.state, b.closed_by) == ("closed", "supervisor")
    assert f"run #{trial.pk}, succeeded" in b.reason
    assert continued(runs) == runs  # closed by the sweep, the same pass continued what it held


@pytest.mark.django_db
def test_a_failed_trial_opens_it_again(org, agent, limits):
    runs = storm(org, 5)
    supervise_once()
    finish_continuations(runs[:3])
    b = RecoveryBreaker.objects.get()
    limits.CONSOLE_BREAKER_COOLOFF_SECONDS = 0
    supervise_once()
    trial = Run.objects.get(continues=runs[3])
    limits.CONSOLE_BREAKER_COOLOFF_SECONDS = 900
    e.crash_after_dispatch(trial, 2)

    report = supervise_once()
    assert report.breakers["reopened"] == [b.pk]
    b.refresh_from_db()
    assert (b.state, b.probe_run_id) == ("open", None)
    assert not Run.objects.filter(continues=runs[4]).exists()
    kinds = list(Event.objects.filter(kind__startswith="breaker_").order_by("id").values_list("kind", flat=True))
    assert kinds == ["breaker_opened", "breaker_half_open", "breaker_opened"]


# --- concurrency -------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_four_supervisors_tripping_at_once_open_one_breaker(org, agent, limits):
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connections

    limits.CONSOLE_BREAKER_TASKS = 2
    runs = storm(org, 12)
    start = threading.Barrier(4)

    def supervisor(_):
        start.wait()
        try:
            return supervise_once()
        finally:
            connections.close_all()

    with ThreadPoolExecutor(4) as pool:
        reports = list(pool.map(supervisor, range(4)))

    assert not any(r.failed for r in reports), [r.failed for r in reports]
    (b,) = RecoveryBreaker.objects.all()
    assert Event.objects.filter(kind="breaker_opened").count() == 1
    # Each run is counted once, whichever supervisor looked at it first; none is continued twice.
    assert RecoveryFailure.objects.count() == 12
    assert all(Run.objects.filter(continues=r).count() <= 1 for r in runs)
    made = len(continued(runs))
    supervise_once()
    b.refresh_from_db()
    assert b.tasks >= 12 - made and len(continued(runs)) == made, "nothing more continues while it is open"


# --- its machine -------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "source,target",
    [(s, t) for s in ("open", "half_open", "closed") for t in ("open", "half_open", "closed") if s != t],
)
def test_every_breaker_move_outside_its_table_is_refused_and_every_move_inside_it_is_made(org, agent, source, target):
    from django.db import transaction
    from django.utils import timezone

    from recovery.transitions import BREAKERS
    from tasks.transitions import IllegalTransition

    now = timezone.now()
    # A row in `source`, written directly as a fixture (the one place a test may).
    b = RecoveryBreaker.objects.create(
        org=org, agent=agent, signature="s", tasks=11, first_at=now, last_at=now, opened_at=now, state=source
    )
    allowed = (source, target) in {
        ("open", "half_open"),
        ("open", "closed"),
        ("half_open", "open"),
        ("half_open", "closed"),
    }
    with transaction.atomic():
        if allowed:
            assert BREAKERS.move(b.pk, target, expect=source) == 1
        else:
            with pytest.raises(IllegalTransition):
                BREAKERS.move(b.pk, target, expect=source)
    assert RecoveryBreaker.objects.get(pk=b.pk).state == (target if allowed else source)


def test_the_house_rules_catch_a_breakers_state_written_outside_its_machine():
    import runpy

    from tests.processes import ROOT

    lint_house = runpy.run_path(str(ROOT / "bin" / "lint_house.py"))
    bad = (
        "def v():\n    RecoveryBreaker.objects.filter(pk=1).update(state='closed')\n    Thing.objects.update(state=1)\n"
    )
    assert len(lint_house["state_writes"](bad)) == 1


@pytest.mark.django_db
def test_failures_are_forgotten_once_no_window_or_recent_breaker_counts_them(org, agent, limits):
    storm(org, 2)
    supervise_once()
    assert RecoveryFailure.objects.count() == 2
    breakers.breakers_sweep(now=timezone.now() + timedelta(days=7))
    assert RecoveryFailure.objects.count() == 2
    breakers.breakers_sweep(now=timezone.now() + timedelta(days=8, minutes=1))
    assert RecoveryFailure.objects.count() == 0
