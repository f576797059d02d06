"""Two people acting on one card at once admit exactly one attempt, on PostgreSQL and on SQLite."""

import threading

import pytest

from recovery.models import RecoveryAttempt
from tasks.models import Run
from tests.conftest import token_client
from tests.factories import make_member, user_token
from tests.recovery import engine as e
from tests.recovery.races import race

pytestmark = [pytest.mark.django_db(transaction=True)]


def assert_one_admission(action, responses) -> None:
    assert RecoveryAttempt.objects.filter(action=action).count() == 1
    assert Run.objects.filter(continues_id=action.run_id).count() == 1
    attempt = RecoveryAttempt.objects.get(action=action)
    for r in responses:
        if r.status_code == 409:
            assert r.json()["code"] == "stale_version", r.json()
        else:
            assert r.status_code in (200, 202), r.content
            body = r.json()
            number = body.get("number") or body["attempt_history"][0]["number"]
            assert number == attempt.number  # the winner's attempt, never a second one
    assert sum(r.status_code in (200, 202) for r in responses) == 1


@pytest.mark.parametrize("round_", range(3))
def test_two_operators_retrying_one_action_at_once_admit_one_attempt(org, agent, operator, round_):
    action = e.parked(org, [e.SAFE, e.WRITE], 2)
    clients = [token_client(user_token(operator)), token_client(user_token(make_member(org, "otto", "operator")))]
    body = {"version": action.version, "accept_duplicate_risk": True}
    url = f"/api/actions/{action.pk}/retry/"

    responses = race([lambda c=c: c.post(url, body, format="json") for c in clients])

    assert sorted(r.status_code for r in responses) == [202, 409], [r.content for r in responses]
    assert_one_admission(action, responses)


def test_a_retry_and_a_decision_at_once_admit_one_attempt(org, agent, operator):
    action = e.parked(org, [e.SAFE, e.WRITE], 2)
    olive = token_client(user_token(operator))
    otto = token_client(user_token(make_member(org, "otto", "operator")))
    v = action.version

    responses = race(
        [
            lambda: olive.post(
                f"/api/actions/{action.pk}/retry/", {"version": v, "accept_duplicate_risk": True}, format="json"
            ),
            lambda: otto.post(
                f"/api/actions/{action.pk}/decision/",
                {"version": v, "outcome": "performed", "note": "it is on disk"},
                format="json",
            ),
        ]
    )

    assert_one_admission(action, responses)


def test_two_opposite_dependency_additions_at_once_never_form_a_cycle(org, agent, operator, monkeypatch):
    """A waits on B and B waits on A, asked at the same moment: one is added, the other refused as a cycle.

    Each addition's cycle check is held until the other has had the chance to read the graph too, so
    without a lock both would pass it; the organization's lock makes the second read after the first commits.
    """
    from recovery import controls

    a, b = e.start(org, [e.SAFE], title="a"), e.start(org, [e.SAFE], title="b")
    both_read = threading.Barrier(2, timeout=2)
    real = controls._reaches

    def reaches_then_wait(start, target, **kw):
        found = real(start, target, **kw)
        try:
            both_read.wait()
        except threading.BrokenBarrierError:
            pass  # the other is waiting for the lock: it reads after this one commits
        return found

    monkeypatch.setattr(controls, "_reaches", reaches_then_wait)
    clients = [token_client(user_token(operator)), token_client(user_token(make_member(org, "otto", "operator")))]
    responses = race(
        [
            lambda: clients[0].post(f"/api/tasks/{a.pk}/dependencies/", {"add": [b.pk]}, format="json"),
            lambda: clients[1].post(f"/api/tasks/{b.pk}/dependencies/", {"add": [a.pk]}, format="json"),
        ]
    )
    assert sorted(r.status_code for r in responses) == [200, 409], [r.content for r in responses]
    refused = next(r for r in responses if r.status_code == 409)
    assert refused.json()["code"] == "dependency_cycle"
    through = a.dependencies.through
    assert through.objects.filter(from_task_id__in=[a.pk, b.pk]).count() == 1
