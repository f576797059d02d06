"""The HTMX card actions: CSRF, organization and role boundaries, stale versions, the duplicate-risk rule."""

import re
from types import SimpleNamespace

import pytest

from recovery.actions import action_decide
from recovery.models import RecoveryAction, RecoveryAttempt
from recovery.supervisor.loop import supervise_once
from tasks.models import Run, Task
from tasks.services import run_claim, task_create, task_pause
from tests.console.scenarios import (
    SAFE_PLAN,
    continuation_action,
    running_task,
    unknown_outcome_action,
    worker_of,
)
from tests.helpers import visible_text

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def world(org, agent, careful):
    unknown = unknown_outcome_action(org, title="t-unknown")
    cont = continuation_action(org, title="t-continuation")
    paused = task_create(org=org, actor="t", title="t-paused", agent="builder", input=SAFE_PLAN)
    task_pause(actor="olive", task=paused)
    running, run = running_task(org, title="t-running")
    return SimpleNamespace(unknown=unknown, cont=cont, paused=paused, running=running, run=run)


# Each card action: its URL and the body a browser would post, and the card it answers with.
ENDPOINTS = {
    "retry": lambda w: (f"/actions/{w.cont.pk}/retry/", {"version": w.cont.version}, f"action-{w.cont.pk}"),
    "decision": lambda w: (
        f"/actions/{w.unknown.pk}/decision/",
        {"version": w.unknown.version, "outcome": "not_performed", "note": "not there", "accept_duplicate_risk": "1"},
        f"action-{w.unknown.pk}",
    ),
    "cancel": lambda w: (f"/actions/{w.unknown.pk}/cancel/", {"version": w.unknown.version}, f"action-{w.unknown.pk}"),
    "pause": lambda w: (f"/tasks/{w.running.pk}/pause/", {}, f"task-{w.running.pk}"),
    "resume": lambda w: (f"/tasks/{w.paused.pk}/resume/", {}, f"task-{w.paused.pk}"),
    "stop": lambda w: (f"/runs/{w.run.pk}/stop/", {}, f"task-{w.running.pk}"),
}
ACTION_ENDPOINTS = ("retry", "decision", "cancel")


def state() -> dict:
    """Everything a card action could change."""
    return {
        "attempts": list(RecoveryAttempt.objects.order_by("id").values_list("id", flat=True)),
        "actions": list(RecoveryAction.objects.order_by("id").values_list("id", "status", "version", "attempts")),
        "runs": list(Run.objects.order_by("id").values_list("id", "status", "stop_reason")),
        "tasks": list(Task.objects.order_by("id").values_list("id", "paused", "status")),
    }


def card(content: str, dom_id: str) -> str:
    match = re.search(rf'<(article|section) id="{dom_id}".*?</(article|section)>', content, re.S)
    assert match, f"no #{dom_id} in the response"
    return match.group(0)


def refusal(content: str) -> str:
    match = re.search(r'<p class="refusal"[^>]*>(.*?)</p>', content, re.S)
    assert match, "no visible refusal in the card"
    return re.sub(r"<[^>]+>", "", match.group(1))


# --- boundaries ------------------------------------------------------------------------


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_csrf_is_enforced(endpoint, world, login, operator):
    url, data, dom_id = ENDPOINTS[endpoint](world)
    client = login(operator, csrf=True)
    before = state()
    response = client.post(url, data, **HX)
    assert response.status_code == 403
    assert state() == before

    # The same request with the page's token goes through: the 403 was the CSRF check.
    client.get(f"/tasks/{world.running.pk}/")
    token = client.cookies["csrftoken"].value
    response = client.post(url, data, HTTP_X_CSRFTOKEN=token, **HX)
    assert response.status_code == 200, response.text
    assert f'id="{dom_id}"' in response.text
    assert state() != before


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_another_organizations_object_is_404(endpoint, world, login, outsider):
    url, data, _ = ENDPOINTS[endpoint](world)
    before = state()
    for headers in (HX, {}):
        response = login(outsider).post(url, data, **headers)
        assert response.status_code == 404
        assert "t-unknown" not in response.text and "t-running" not in response.text
    assert state() == before


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_a_viewers_forged_htmx_post_is_refused_in_the_card(endpoint, world, login, viewer):
    url, data, dom_id = ENDPOINTS[endpoint](world)
    before = state()
    response = login(viewer).post(url, data, **HX)
    assert response.status_code == 403
    html = card(response.text, dom_id)
    assert "operator role" in refusal(html)
    assert "<form" not in html  # the re-rendered card offers a viewer nothing to press
    assert state() == before


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_a_viewers_forged_plain_post_is_refused_with_403(endpoint, world, login, viewer):
    """A forged form post (no HX-Request) is refused as plainly: 403 and the reason, not a redirect."""
    url, data, _ = ENDPOINTS[endpoint](world)
    before = state()
    response = login(viewer).post(url, data)
    assert response.status_code == 403, f"{response.status_code} {response.get('Location', '')}"
    assert "operator role" in response.text
    assert state() == before


# --- stale versions ----------------------------------------------------------------------


@pytest.fixture
def decided_once(org, agent, operator):
    """An unknown-outcome action whose version moved on (an `unresolved` decision) since a card was drawn."""
    action = unknown_outcome_action(org)
    action_decide(action_id=action.pk, user=operator, version=1, outcome="unresolved", note="checking")
    action.refresh_from_db()
    assert action.version == 2 and action.status == "open"
    return action


@pytest.mark.parametrize(
    "path,data",
    [
        ("retry", {"accept_duplicate_risk": "1"}),
        ("decision", {"outcome": "not_performed", "accept_duplicate_risk": "1"}),
        ("decision", {"outcome": "performed"}),
        ("cancel", {}),
    ],
)
def test_a_stale_version_answers_409_with_the_current_card(path, data, decided_once, login, operator):
    action = decided_once
    before = state()
    response = login(operator).post(f"/actions/{action.pk}/{path}/", {"version": 1, **data}, **HX)
    assert response.status_code == 409
    html = card(response.text, f"action-{action.pk}")
    text = refusal(html)
    assert "version 2" in text and "out of date" in text
    assert 'data-version="2"' in html and 'name="version" value="2"' in html
    assert state() == before


def test_a_missing_version_is_stale_too(decided_once, login, operator):
    before = state()
    response = login(operator).post(f"/actions/{decided_once.pk}/cancel/", {}, **HX)
    assert response.status_code == 409 and "version 2" in refusal(response.text)
    assert state() == before


# --- the duplicate-risk rule and the honest progress line ---------------------------------


def test_not_performed_needs_the_duplicate_risk_accepted(org, agent, login, operator):
    action = unknown_outcome_action(org)
    client = login(operator)
    before = state()
    response = client.post(
        f"/actions/{action.pk}/decision/", {"version": 1, "outcome": "not_performed", "note": "gone"}, **HX
    )
    assert response.status_code == 409
    html = card(response.text, f"action-{action.pk}")
    assert "duplicate risk" in refusal(html)
    assert "Retry requested" not in html and 'data-status="open"' in html
    assert ">gone</textarea>" in html, "the refused form lost the note the person typed"
    assert state() == before

    response = client.post(
        f"/actions/{action.pk}/decision/",
        {"version": 1, "outcome": "not_performed", "note": "gone", "accept_duplicate_risk": "1"},
        **HX,
    )
    assert response.status_code == 200, response.text
    html = card(response.text, f"action-{action.pk}")
    # A decision is named a decision, never a retry; the queued run is not called a continuation.
    text = visible_text(html)
    assert "Decision recorded: it did not happen" in text and 'class="refusal"' not in html
    assert "Retry" not in text and "Continu" not in text
    assert "duplicate risk accepted" in html and "gone" in html
    attempt = RecoveryAttempt.objects.get(action=action)
    assert attempt.accepted_duplicate_risk and attempt.decision == "not_performed" and attempt.note == "gone"


def test_retry_of_an_unknown_outcome_needs_the_duplicate_risk_accepted(org, agent, login, operator):
    action = unknown_outcome_action(org)
    client = login(operator)
    before = state()
    response = client.post(f"/actions/{action.pk}/retry/", {"version": 1}, **HX)
    assert response.status_code == 409 and "duplicate risk" in refusal(response.text)
    assert state() == before
    response = client.post(f"/actions/{action.pk}/retry/", {"version": 1, "accept_duplicate_risk": "on"}, **HX)
    assert response.status_code == 200 and "Retry requested" in response.text
    assert RecoveryAttempt.objects.filter(action=action, accepted_duplicate_risk=True).count() == 1


def test_continuing_is_shown_only_once_the_continuation_was_claimed(org, agent, login, operator):
    action = unknown_outcome_action(org)
    client = login(operator)
    response = client.post(
        f"/actions/{action.pk}/decision/",
        {"version": 1, "outcome": "not_performed", "accept_duplicate_risk": "1"},
        **HX,
    )
    assert response.status_code == 200
    continuation = Run.objects.get(continues_id=action.run_id)
    assert continuation.status == "queued"
    for content in (response.text, client.get(f"/tasks/{action.task_id}/").text):
        text = visible_text(card(content, f"action-{action.pk}"))
        assert "Decision recorded" in text and f"Run #{continuation.pk} queued" in text
        assert "Continu" not in text and "Retry" not in text

    supervise_once()  # nothing claimed it yet: the supervisor must not call it continued
    text = visible_text(card(client.get(f"/tasks/{action.task_id}/").text, f"action-{action.pk}"))
    assert "Decision recorded" in text and "Continu" not in text

    claimed = run_claim(worker=worker_of(org), label="w1-b")
    assert claimed.pk == continuation.pk
    # The claim that started the continuation settled the action in its own transaction.
    action.refresh_from_db()
    assert action.status == "resolved" and action.resolution == "continued"
    html = card(client.get(f"/tasks/{action.task_id}/").text, f"action-{action.pk}")
    assert f"Continuing in run #{continuation.pk}" in html and "Retry requested" not in html
    assert f"Run #{continuation.pk} queued" not in html
    # A refused action on the settled card re-renders it with the same line.
    response = client.post(f"/actions/{action.pk}/cancel/", {"version": action.version}, **HX)
    assert response.status_code == 409
    assert f"Continuing in run #{continuation.pk}" in card(response.text, f"action-{action.pk}")


@pytest.mark.parametrize("path,data", [("retry", {}), ("decision", {"outcome": "performed", "note": "on disk"})])
def test_a_double_submit_creates_exactly_one_attempt(path, data, org, agent, careful, login, operator):
    action = continuation_action(org) if path == "retry" else unknown_outcome_action(org)
    client = login(operator)
    first = client.post(f"/actions/{action.pk}/{path}/", {"version": 1, **data}, **HX)
    second = client.post(f"/actions/{action.pk}/{path}/", {"version": 1, **data}, **HX)
    words = "Retry requested" if path == "retry" else "Decision recorded"
    assert first.status_code == 200 and words in first.text
    assert second.status_code == 409
    html = card(second.text, f"action-{action.pk}")
    assert "version 2" in refusal(html) and words in html
    assert RecoveryAttempt.objects.filter(action=action).count() == 1
    assert Run.objects.filter(task_id=action.task_id).count() == 2


# --- the happy paths answer with the re-rendered card -------------------------------------


def test_retry_of_a_continuation_requests_one_attempt(org, agent, careful, login, operator):
    action = continuation_action(org)
    response = login(operator).post(f"/actions/{action.pk}/retry/", {"version": 1}, **HX)
    assert response.status_code == 200
    html = card(response.text, f"action-{action.pk}")
    assert 'data-status="retrying"' in html and "Retry requested" in html and "1 of 2 attempts used" in html
    assert "nothing has resumed yet" in html and "Continu" not in visible_text(html)
    assert RecoveryAttempt.objects.get(action=action).requested_by == "olive"


def test_without_htmx_a_card_action_redirects_back_to_the_card(org, agent, careful, login, operator):
    action = continuation_action(org)
    response = login(operator).post(f"/actions/{action.pk}/retry/", {"version": 1})
    assert response.status_code == 302
    assert response["Location"] == f"/tasks/{action.task_id}/#action-{action.pk}"
    assert RecoveryAttempt.objects.filter(action=action).count() == 1


def test_cancel_closes_the_action(org, agent, login, operator):
    action = unknown_outcome_action(org)
    response = login(operator).post(f"/actions/{action.pk}/cancel/", {"version": 1}, **HX)
    assert response.status_code == 200
    html = card(response.text, f"action-{action.pk}")
    assert 'data-status="cancelled"' in html and "<form" not in html
    assert not RecoveryAttempt.objects.exists()


def test_pause_resume_and_stop_answer_with_the_task_header(world, login, operator):
    client = login(operator)
    response = client.post(f"/tasks/{world.running.pk}/pause/", **HX)
    assert response.status_code == 200
    html = card(response.text, f"task-{world.running.pk}")
    assert "Resume task" in html
    world.run.refresh_from_db()
    assert world.run.status == "stopping" and world.run.stop_reason == "paused"

    _, run = running_task(world.running.org, title="t-second")
    response = client.post(f"/runs/{run.pk}/stop/", **HX)
    assert response.status_code == 200 and f'id="task-{run.task_id}"' in response.text
    run.refresh_from_db()
    assert run.status == "stopping" and run.stop_reason == "stop" and run.stop_requested_by == "olive"

    response = client.post(f"/tasks/{world.paused.pk}/resume/", **HX)
    assert response.status_code == 200 and "Pause task" in card(response.text, f"task-{world.paused.pk}")
    assert Task.objects.get(pk=world.paused.pk).paused is False
