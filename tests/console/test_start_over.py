"""The task header's Start over control, and how a fresh run is named on its card and page."""

import re

import pytest

from tasks.models import Event, Run, Step
from tests.console.scenarios import expire_leases_and_supervise, unknown_outcome_action
from tests.recovery import engine
from tests.recovery.engine import SAFE

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}


def counts():
    return {"runs": Run.objects.count(), "events": Event.objects.count(), "steps": Step.objects.count()}


def header(html: str, task_id: int) -> str:
    match = re.search(rf'<section id="task-{task_id}".*?</section>', html, re.S)
    assert match, "no task header"
    return match.group(0)


def test_the_task_header_offers_start_over_naming_the_risk_and_refuses_without_consent(
    org, agent, login, operator, viewer
):
    action = unknown_outcome_action(org)
    page = login(operator).get(f"/tasks/{action.task_id}/")
    html = header(page.content.decode(), action.task_id)
    assert "Start over" in html and "reuses nothing" in html and "not a recovery" in html
    assert 'name="accept_duplicate_risk"' in html and "file_write" in html
    assert "Start over" not in header(login(viewer).get(f"/tasks/{action.task_id}/").content.decode(), action.task_id)

    refused = login(operator).post(f"/tasks/{action.task_id}/start-over/", {}, **HX)
    assert refused.status_code == 409
    assert "accept the duplicate risk" in refused.content.decode()
    assert Run.objects.filter(task_id=action.task_id).count() == 1

    done = login(operator).post(f"/tasks/{action.task_id}/start-over/", {"accept_duplicate_risk": "1"}, **HX)
    assert done.status_code == 200
    fresh = Run.objects.filter(task_id=action.task_id).order_by("-id").first()
    assert fresh.continues_id is None and fresh.status == "queued"
    html = done.content.decode()
    assert f"Start over is possible once run #{fresh.pk} has ended" in html

    # The run card and the run page call it a fresh start, never a recovery.
    page = login(operator).get(f"/agents/builder/runs/{fresh.pk}/").content.decode()
    assert f"Fresh start by olive after run #{action.run_id}" in page and "reuses nothing" in page
    assert "continues run" not in page and "recover" not in page.lower().split("<main")[-1].split("</main>")[0]


def test_a_viewer_posting_start_over_is_refused_in_the_header(org, agent, login, viewer):
    task = engine.start(org, [SAFE])
    engine.crash_after_dispatch(engine.first_run(task), 1)
    expire_leases_and_supervise()
    before = counts()
    response = login(viewer).post(f"/tasks/{task.pk}/start-over/", {}, **HX)
    assert response.status_code == 403 and "operator role" in response.content.decode()
    assert counts() == before


def test_a_start_over_of_a_batch_and_its_wording_is_pure():
    from recovery.words.runs import fresh_start_text

    assert fresh_start_text({"fresh_start": {"by": "ada", "after": 4}}) == (
        "Fresh start by ada after run #4: runs the task again from the beginning and reuses nothing."
    )
    assert fresh_start_text({"dropped": []}) == "" and fresh_start_text(None) == ""


def test_a_paused_task_says_start_over_waits_for_the_pause_instead_of_offering_it(org, agent, login, operator):
    from tasks.services import task_pause

    task = engine.start(org, [SAFE])
    engine.crash_after_dispatch(engine.first_run(task), 1)
    task_pause(actor=operator, task=task)
    html = header(login(operator).get(f"/tasks/{task.pk}/").content.decode(), task.pk)
    assert f"Start over waits: Task #{task.pk} is paused. Lifted by an operator, with Resume task." in html
    assert f'action="/tasks/{task.pk}/start-over/"' not in html
