"""Continue from step k (recovery/actions/continue_from.py): the preview, its consent, the API, the pages."""

import re
from pathlib import Path

import pytest

from recovery.actions.continue_from import continue_from_preview, task_continue_from
from recovery.words.continue_from import continued_from_text, step_span
from tasks.models import Event, Run, Step
from tests.console.continue_scenarios import five_step_task
from tests.console.scenarios import running_task
from tests.factories import user_token, worker_token
from tests.processes import run_worker
from tests.recovery import engine

HX = {"HTTP_HX_REQUEST": "true"}


def finished_five(org):
    """A five-step task whose first run did all five steps through the engine (no worker process), then failed
    (a done task is closed: Continue from step k, like Start over, waits for it to be reopened)."""
    task = five_step_task(org)
    run = engine.claim(engine.first_run(task))
    engine.advance(run, 5)
    engine.finish(run, "failed")
    return task


def counts():
    return {"runs": Run.objects.count(), "events": Event.objects.count(), "steps": Step.objects.count()}


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_continue_from_step_3_reuses_steps_1_and_2_once_on_disk_and_runs_3_to_5_with_consent(
    daphne_server, org, agent, api, operator, login
):
    token = worker_token(org)
    task = five_step_task(org)
    code, out = run_worker(daphne_server, token)
    assert code == 0, out
    first = Run.objects.get(task=task)
    assert first.status == "succeeded"
    log = Path(task.workspace) / "log.txt"
    assert log.read_text() == "one\ntwo\nfour\nfive\n"
    task.refresh_from_db()
    assert task.status == "done"
    client = login(operator)
    page = client.get(f"/tasks/{task.pk}/continue-from/?seq=3").content.decode()
    assert "The task is done: continuing reopens it." in page
    url = f"/api/tasks/{task.pk}/continue-from/"
    preview = api.post(url, {"seq": 3, "preview": True}, format="json")
    assert preview.status_code == 200, preview.content
    body = preview.json()
    assert body["reused"] == [1, 2] and body["needs_consent"] is True
    assert [s["seq"] for s in body["runs_again"]] == [3, 4, 5]
    # Exactly the two notify steps after k may act outside, with their arguments.
    assert [(s["seq"], s["args"]) for s in body["runs_again"] if s["side_effect"]] == [
        (4, {"command": "echo four >> log.txt"}),
        (5, {"command": "echo five >> log.txt"}),
    ]
    assert body["runs_again"][0] == {
        "seq": 3, "tool": "sleep", "args": {"seconds": 0}, "recovery_mode": "replay", "side_effect": False,
    }  # fmt: skip

    before = counts()
    refused = api.post(url, {"seq": 3}, format="json")
    assert refused.status_code == 409 and refused.json()["code"] == "needs_consent"
    assert [s["seq"] for s in refused.json()["steps"]] == [4, 5]
    no_reason = api.post(url, {"seq": 3, "accept_duplicate_risk": True}, format="json")
    assert no_reason.status_code == 400 and no_reason.json()["code"] == "reason_required"
    assert counts() == before

    queued = api.post(url, {"seq": 3, "accept_duplicate_risk": True, "reason": "the log may repeat"}, format="json")
    assert queued.status_code == 202, queued.content
    second = Run.objects.get(pk=queued.json()["run"])
    # The done task was reopened by the continuation, and says so.
    task.refresh_from_db()
    assert task.status != "done"
    reopened = Event.objects.get(task=task, kind="task_reopened")
    assert reopened.payload["was"] == "done" and reopened.payload["continued_from"] == 3
    assert second.continues_id is None and second.attempt == 1 and second.status == "queued"
    event = Event.objects.get(task=task, kind="run_continued_from")
    assert event.payload["reused"] == [1, 2] and event.payload["from_run"] == first.pk
    assert event.payload["accepted_duplicate_risk"] is True and event.payload["reason"] == "the log may repeat"

    code, out = run_worker(daphne_server, token)
    assert code == 0, out
    second.refresh_from_db()
    assert second.status == "succeeded"
    steps = {s.seq: s for s in Step.objects.filter(run=second)}
    assert [seq for seq in sorted(steps) if steps[seq].reused_from_id] == [1, 2]
    assert all(steps[seq].reused_from_id is None and steps[seq].phase == "completed" for seq in (3, 4, 5))
    # Steps 1 and 2 were reused: their lines are on disk once; 4 and 5 ran again, as the consent said.
    assert log.read_text() == "one\ntwo\nfour\nfive\nfour\nfive\n"

    said = (
        f"Continuing from step 3 in run #{first.pk} (by olive): steps 1\N{EN DASH}2 reused, "
        f"steps 3\N{EN DASH}5 run again. Duplicate risk accepted: the log may repeat."
    )
    assert said in client.get(f"/tasks/{task.pk}/").content.decode()
    run_page = client.get(f"/agents/builder/runs/{second.pk}/").content.decode()
    assert said in run_page and "first run of the task" not in run_page
    main = run_page.lower().split("<main")[-1].split("</main>")[0]
    assert "recovered" not in main and "resumed" not in main


@pytest.mark.django_db
def test_a_cancelled_task_is_refused_as_start_over_refuses_it_and_a_done_one_is_reopened(org, agent, api):
    cancelled, done = finished_five(org), finished_five(org)
    for task, resolution in ((cancelled, "cancelled"), (done, "done")):
        closed = api.post(f"/api/tasks/{task.pk}/close/", {"resolution": resolution, "reason": "r"}, format="json")
        assert closed.status_code == 200, closed.content
    body = {"seq": 2, "accept_duplicate_risk": True, "reason": "again"}
    refused = api.post(f"/api/tasks/{cancelled.pk}/continue-from/", body, format="json")
    assert refused.status_code == 409 and refused.json()["gate"] == "task_closed"
    assert api.post(f"/api/tasks/{cancelled.pk}/start-over/", {}, format="json").json()["gate"] == "task_closed"
    assert api.post(f"/api/tasks/{done.pk}/continue-from/", body, format="json").status_code == 202
    done.refresh_from_db()
    assert done.status == "todo" and Run.objects.filter(task=done, status="queued").count() == 1


@pytest.mark.django_db
def test_refused_while_a_run_is_live_with_the_same_refusal_as_start_over(org, agent, operator, api):
    task, run = running_task(org)
    engine.do_step(run, 1)
    response = api.post(f"/api/tasks/{task.pk}/continue-from/", {"seq": 1, "accept_duplicate_risk": True,
                                                                  "reason": "r"}, format="json")  # fmt: skip
    assert response.status_code == 409
    assert response.json()["code"] in ("gate_closed", "not_eligible")
    start_over = api.post(f"/api/tasks/{task.pk}/start-over/", {"accept_duplicate_risk": True}, format="json")
    assert response.json()["code"] == start_over.json()["code"]
    assert Run.objects.filter(task=task).count() == 1


@pytest.mark.django_db
def test_refused_after_the_run_ended_but_a_continuation_is_queued(org, agent, operator):
    from tasks.errors import NotEligible

    task = finished_five(org)
    task_continue_from(task_id=task.pk, user=operator, seq=3, accept_duplicate_risk=True, reason="once")
    with pytest.raises(NotEligible) as refused:
        task_continue_from(task_id=task.pk, user=operator, seq=3, accept_duplicate_risk=True, reason="twice")
    assert refused.value.extra["reason"] == "run_live"


@pytest.mark.django_db
def test_a_viewer_is_403_another_organization_404_and_a_step_out_of_range_400(
    org, agent, viewer, other_org, make_token_client, api
):
    from tests.factories import make_member

    task = finished_five(org)
    url = f"/api/tasks/{task.pk}/continue-from/"
    watcher = make_token_client(user_token(viewer))
    outsider = make_token_client(user_token(make_member(other_org, "gina", "operator")))
    before = counts()
    assert watcher.post(url, {"seq": 3, "preview": True}, format="json").status_code == 403
    assert watcher.post(url, {"seq": 3}, format="json").status_code == 403
    assert outsider.post(url, {"seq": 3, "preview": True}, format="json").status_code == 404
    assert outsider.post(url, {"seq": 3}, format="json").status_code == 404
    for seq in (0, 6, -1):
        bad = api.post(url, {"seq": seq, "preview": True}, format="json")
        assert bad.status_code == 400 and bad.json()["code"] == "invalid" and bad.json()["last"] == 5, seq
        assert api.post(url, {"seq": seq}, format="json").status_code == 400
    assert api.post(url, {"seq": "three"}, format="json").status_code == 400
    assert counts() == before


@pytest.mark.django_db
def test_from_step_1_reuses_nothing_and_from_a_step_after_a_failure_is_refused(org, agent, operator):
    from tasks.errors import NotEligible

    failing = five_step_task(org, title="fails at 2")
    first = engine.claim(engine.first_run(failing))
    engine.do_step(first, 1)
    engine.plan_step(first, 2)
    engine.dispatch_step(first, 2)
    engine.complete_step(first, 2, ok=False, error="boom")
    engine.do_step(first, 3)  # a worker may go on past a failed step (an agent does)
    engine.finish(first, "failed")
    with pytest.raises(NotEligible) as refused:
        continue_from_preview(task_id=failing.pk, user=operator, seq=3)
    assert refused.value.extra == {"reason": "not_reusable", "seq": 2}
    assert continue_from_preview(task_id=failing.pk, user=operator, seq=2).reused == [1]

    task = finished_five(org)
    preview = continue_from_preview(task_id=task.pk, user=operator, seq=1)
    assert preview.reused == [] and [s["seq"] for s in preview.side_effects] == [1, 2, 4, 5]
    run = task_continue_from(task_id=task.pk, user=operator, seq=1, accept_duplicate_risk=True, reason="all")
    assert not Step.objects.filter(run=run).exists()
    assert continued_from_text(run.carry).startswith(f"Continuing from step 1 in run #{engine.first_run(task).pk}")
    assert "nothing reused, steps 1\N{EN DASH}5 run again" in continued_from_text(run.carry)


@pytest.mark.django_db
def test_without_a_notify_step_after_k_no_consent_is_asked(org, agent, operator):
    task = finished_five(org)
    preview = continue_from_preview(task_id=task.pk, user=operator, seq=3)
    assert preview.needs_consent
    Step.objects.filter(run=engine.first_run(task), seq__in=(4, 5)).update(tool="sleep", recovery_mode="replay")
    preview = continue_from_preview(task_id=task.pk, user=operator, seq=3)
    assert not preview.needs_consent
    run = task_continue_from(task_id=task.pk, user=operator, seq=3)
    assert run.carry["continued_from"]["accepted_duplicate_risk"] is False


def test_the_words_are_pure():
    assert step_span([1, 2, 3]) == "steps 1\N{EN DASH}3"
    assert step_span([4]) == "step 4" and step_span([1, 2, 5]) == "steps 1\N{EN DASH}2 and 5"
    carry = {"continued_from": {"run": 7, "seq": 4, "by": "ada", "reused": [1, 2, 3], "runs_again": [4, 5]}}
    assert continued_from_text(carry) == (
        "Continuing from step 4 in run #7 (by ada): steps 1\N{EN DASH}3 reused, steps 4\N{EN DASH}5 run again."
    )
    assert continued_from_text({"fresh_start": {}}) == "" and continued_from_text(None) == ""


# --- the browser console (server side) ------------------------------------------------------------------------


def header(html: str, task_id: int) -> str:
    match = re.search(rf'<section id="task-{task_id}".*?</section>', html, re.S)
    assert match, "no task header"
    return match.group(0)


@pytest.mark.django_db
def test_the_task_header_and_run_page_offer_it_and_the_preview_asks_consent_and_a_reason(
    org, agent, operator, viewer, login
):
    task = finished_five(org)
    first = engine.first_run(task)
    client = login(operator, csrf=False)
    html = header(client.get(f"/tasks/{task.pk}/").content.decode(), task.pk)
    assert "Continue from step" in html and f'action="/tasks/{task.pk}/continue-from/"' in html
    assert 'name="seq"' in html and ">4 · bash</option>" in html
    assert "Continue from step" not in header(login(viewer).get(f"/tasks/{task.pk}/").content.decode(), task.pk)
    run_page = client.get(f"/agents/builder/runs/{first.pk}/").content.decode()
    assert f'id="continue-from-{task.pk}"' in run_page

    page = client.get(f"/tasks/{task.pk}/continue-from/?seq=4").content.decode()
    assert f"Reused from run #{first.pk}: steps 1\N{EN DASH}3" in page
    assert "Runs again, fresh: steps 4\N{EN DASH}5." in page and "echo four &gt;&gt; log.txt" in page
    assert "Steps 4\N{EN DASH}5 may act outside again" in page and 'name="accept_duplicate_risk"' in page
    assert 'name="reason"' in page and "csrfmiddlewaretoken" in page

    before = counts()
    refused = client.post(f"/tasks/{task.pk}/continue-from/", {"seq": "4"})
    assert refused.status_code == 409 and "accept the duplicate risk" in refused.content.decode()
    no_reason = client.post(f"/tasks/{task.pk}/continue-from/", {"seq": "4", "accept_duplicate_risk": "1"})
    assert no_reason.status_code == 400 and "a reason is required" in no_reason.content.decode()
    assert "checked" in no_reason.content.decode()
    bad = client.get(f"/tasks/{task.pk}/continue-from/?seq=9")
    assert bad.status_code == 400 and "continue from a step from 1 to 5" in bad.content.decode()
    assert login(viewer).get(f"/tasks/{task.pk}/continue-from/?seq=4").status_code == 403
    assert login(viewer).post(f"/tasks/{task.pk}/continue-from/", {"seq": "4"}).status_code == 403
    assert counts() == before

    done = client.post(
        f"/tasks/{task.pk}/continue-from/", {"seq": "4", "accept_duplicate_risk": "1", "reason": "redo the tail"}
    )
    assert done.status_code == 302 and done["Location"] == f"/tasks/{task.pk}/"
    run = engine.latest_run(task)
    said = f"Continuing from step 4 in run #{first.pk} (by olive): steps 1\N{EN DASH}3 reused, steps 4\N{EN DASH}5"
    assert said in client.get(f"/tasks/{task.pk}/").content.decode()
    assert said in client.get(f"/agents/builder/runs/{run.pk}/").content.decode()


@pytest.mark.django_db
def test_the_preview_page_of_another_organizations_task_is_404(org, agent, other_org, login):
    from tests.factories import make_member

    task = finished_five(org)
    outsider = login(make_member(other_org, "gina", "operator"))
    assert outsider.get(f"/tasks/{task.pk}/continue-from/?seq=2").status_code == 404
    assert outsider.post(f"/tasks/{task.pk}/continue-from/", {"seq": "2"}).status_code == 404


@pytest.mark.django_db
def test_a_diverged_replay_offers_continue_from_the_split_step_and_the_agent_takes_it_onward_fresh(
    org, api, runner, operator, login
):
    from recovery.models import RecoveryAction
    from tests.agents_api import Agent
    from tests.factories import make_agent
    from tests.helpers import outer_html
    from tests.recovery.agent_scenarios import diverge

    make_agent(org, "coder")
    task, second = diverge(runner, api)
    action = RecoveryAction.objects.get(run_id=second.run)
    client = login(operator)
    card = outer_html(client.get(f"/tasks/{task['id']}/").text, f"action-{action.pk}")
    assert f'href="/tasks/{task["id"]}/continue-from/?seq=2"' in card
    assert "Continue from step 2" in card and "reuses step 1 and lets the agent take step 2 onward fresh" in card

    page = client.get(f"/tasks/{task['id']}/continue-from/?seq=2").content.decode()
    assert f"Reused from run #{second.run}: step 1" in page and "file_read" in page
    done = client.post(f"/tasks/{task['id']}/continue-from/", {"seq": "2"})
    assert done.status_code == 302, done.content.decode()
    assert RecoveryAction.objects.get(pk=action.pk).status == "retired"
    claim = Agent.claims(runner).claim
    assert [e["seq"] for e in claim["reused"]] == [1] and claim["next_seq"] == 2


@pytest.mark.django_db(transaction=True)
def test_two_operators_continuing_at_once_queue_one_run(org, agent, operator, make_token_client):
    from tests.factories import make_member
    from tests.recovery.races import race

    task = finished_five(org)
    otto = make_member(org, "otto", "operator")
    clients = [make_token_client(user_token(operator)), make_token_client(user_token(otto))]
    body = {"seq": 3, "accept_duplicate_risk": True, "reason": "redo the tail"}
    url = f"/api/tasks/{task.pk}/continue-from/"

    responses = race([lambda c=c: c.post(url, body, format="json") for c in clients])

    assert sorted(r.status_code for r in responses) == [202, 409], [r.content for r in responses]
    assert next(r for r in responses if r.status_code == 409).json()["reason"] == "run_live"
    assert Run.objects.filter(task=task).count() == 2
    assert Event.objects.filter(task=task, kind="run_continued_from").count() == 1
    assert Step.objects.filter(run__task=task, reused_from__isnull=False).count() == 2


@pytest.mark.django_db
def test_the_old_runs_page_links_forward_to_the_run_that_continued_from_it(org, agent, operator, login):
    task = finished_five(org)
    first = engine.first_run(task)
    client = login(operator)
    assert "Continued from step" not in client.get(f"/agents/builder/runs/{first.pk}/").content.decode()

    later = task_continue_from(task_id=task.pk, user=operator, seq=3, accept_duplicate_risk=True, reason="again")

    page = client.get(f"/agents/builder/runs/{first.pk}/").content.decode()
    assert re.search(
        rf'<a class="continued-later" href="/agents/builder/runs/{later.pk}/">Continued from step 3 in run '
        rf"#{later.pk} →</a>",
        page,
    )
    back = client.get(f"/agents/builder/runs/{later.pk}/").content.decode()
    assert "Continued from step" not in back, "the new run links back, not forward"
