"""DESIGN §6a through real worker processes: a crash, a decision, the continuation a real worker runs."""

import signal
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from recovery.models import RecoveryAction
from tasks.models import Run
from tasks.services import task_create
from tests.factories import user_token, worker_token
from tests.helpers import plan
from tests.processes import lapse_and_supervise, run_worker
from tests.truth.surfaces import assert_no_iso, read

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_crash_a_decision_and_a_real_continuation_read_true_on_every_surface(daphne_server, org, agent, operator):
    token = worker_token(org)
    task = task_create(
        org=org,
        actor="t",
        title="report",
        agent="builder",
        input=plan(("file_write", {"path": "report.md", "content": "# Report"}), ("file_read", {"path": "report.md"})),
    )
    code, out = run_worker(daphne_server, token, fault="crash_before_complete:1@1")
    assert code == -signal.SIGKILL, out
    first = Run.objects.get(task=task)
    lapse_and_supervise(first)
    action = RecoveryAction.objects.get(task=task)
    assert action.kind == "unknown_outcome"
    assert (Path(task.workspace) / "report.md").exists()  # the tool did run before the crash

    s = read(operator, task.pk)
    assert "Needs decision" in s.row and "Needs decision" in s.inbox and "Unknown outcome: file_write, step 1" in s.row
    assert_no_iso(s)

    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {user_token(operator)}")
    r = api.post(
        f"/api/actions/{action.pk}/decision/",
        {"version": action.version, "outcome": "performed", "note": "report.md is there"},
        format="json",
    )
    assert r.status_code == 200, r.content
    assert "Retry" not in " ".join(r.json()["summary"]) and "Decision recorded: it happened" in r.json()["summary"][0]
    s = read(operator, task.pk)
    assert "Decision recorded: it happened" in s.card(f"action-{action.pk}")
    assert "Retry" not in s.card(f"action-{action.pk}")

    code, out = run_worker(daphne_server, token)
    assert code == 0, out
    second = Run.objects.get(continues=first)
    second.refresh_from_db()
    assert second.status == "succeeded"
    # No supervisor pass ran since: the finish itself settled the action and the attempt.
    s = read(operator, task.pk)
    card = s.card(f"action-{action.pk}")
    assert f"Continued in run #{second.pk} — it succeeded." in card
    assert "Retrying" not in s.task and "Cancel action" not in card
    assert "Done" in s.row and "Done" in s.card(f"task-{task.pk}")
    assert "marked performed by olive: report.md is there — no saved result" in s.runs[second.pk]
    assert_no_iso(s)
    assert api.get(f"/api/actions/{action.pk}/").json()["attempt_history"][0]["outcome"] == "succeeded"
