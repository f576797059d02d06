"""Task controls in the task header: an operator uses them; a viewer sees none and a forged POST is refused."""

import pytest
from playwright.sync_api import expect

from tasks.models import Event, Task
from tests.browser.pages import csrf_token, expect_live
from tests.factories import make_agent
from tests.recovery import engine as e

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_operator_reassigns_adds_a_dependency_closes_and_reopens_from_the_header(
    daphne_server, page, sign_in, org, agent, operator
):
    make_agent(org, "reviewer")
    blocker = e.start(org, [e.SAFE], title="Collect the figures")
    task = e.start(org, [e.SAFE], title="Write the weekly report")
    sign_in(page, "olive")
    page.goto(f"{daphne_server.url}/tasks/{task.pk}/")
    expect_live(page)
    header = page.locator(f"#task-{task.pk}")
    header.get_by_text("Change owner, close, dependencies").click()

    # Reassign: the confirmation restates what happens to the old owner's work.
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.accept()))
    header.get_by_label("Owner").select_option("reviewer")
    header.get_by_label("Reason", exact=True).first.fill("builder is on leave")
    header.get_by_role("button", name="Reassign").click()
    expect(header.locator("dd").first).to_have_text("reviewer")
    assert "no longer continue it" in dialogs[-1] and "queued is cancelled" in dialogs[-1]
    assert Task.objects.get(pk=task.pk).agent.name == "reviewer"

    # A dependency holds it. (The controls stay open across the pushes that followed.)
    header = page.locator(f"#task-{task.pk}")
    expect(header.locator("details.task-controls")).to_have_attribute("open", "")
    header.get_by_label("Wait on task #").fill(str(blocker.pk))
    header.get_by_role("button", name="Add dependency").click()
    expect(header).to_contain_text(f"#{blocker.pk}")
    expect(header.locator(".badge").first).to_have_text("Blocked")
    expect(header).to_contain_text("Waiting on task")

    # Close, with a reason; then reopen.
    header.get_by_label("Close as").select_option("cancelled")
    header.locator("form[action$='/close/'] input[name=reason]").fill("the figures never came")
    header.get_by_role("button", name="Close task").click()
    expect(header.locator(".badge").first).to_have_text("Cancelled")
    expect(header).to_contain_text("Closed as cancelled by olive")
    expect(header).to_contain_text("the figures never came")
    assert "waiting follow-ups are marked not delivered" in dialogs[-1]
    expect(page.locator(f"#composer-{task.pk}")).to_contain_text("follow-ups are refused", timeout=10_000)

    header.locator("form[action$='/reopen/'] input[name=reason]").fill("they came after all")
    header.get_by_role("button", name="Reopen").click()
    expect(header.locator(".badge").first).not_to_have_text("Cancelled")
    assert Task.objects.get(pk=task.pk).status == "todo"
    kinds = list(
        Event.objects.filter(task=task, actor="olive", kind__startswith="task_")
        .order_by("id")
        .values_list("kind", flat=True)
    )
    assert kinds == ["task_reassigned", "task_dependencies_changed", "task_closed", "task_reopened"]
    assert page.locator(".refusal").count() == 0


def test_a_refused_control_says_why_inside_the_header_and_keeps_what_was_typed(
    daphne_server, page, sign_in, org, agent, operator
):
    task = e.start(org, [e.SAFE], title="Write the weekly report")
    sign_in(page, "olive")
    page.goto(f"{daphne_server.url}/tasks/{task.pk}/")
    header = page.locator(f"#task-{task.pk}")
    header.get_by_text("Change owner, close, dependencies").click()
    header.get_by_label("Wait on task #").fill(str(task.pk))  # itself: a cycle
    header.get_by_role("button", name="Add dependency").click()
    expect(header.locator(".refusal")).to_contain_text("cycle")
    expect(header.get_by_label("Wait on task #")).to_have_value(str(task.pk))


def test_a_viewer_sees_no_task_controls_and_a_forged_post_gets_403(daphne_server, page, sign_in, org, agent, viewer):
    task = e.start(org, [e.SAFE], title="Write the weekly report")
    sign_in(page, "victor")
    page.goto(f"{daphne_server.url}/tasks/{task.pk}/")
    header = page.locator(f"#task-{task.pk}")
    expect(header).to_contain_text("Write the weekly report")
    expect(header.locator("form")).to_have_count(0)
    expect(header.locator("details.task-controls")).to_have_count(0)
    token = csrf_token(page)
    for path, form in [
        ("owner", {"agent": "builder"}),
        ("close", {"resolution": "done", "reason": "x"}),
        ("continue", {}),
        ("dependencies", {"add": "1"}),
        ("budget", {"limit": "1", "budget_reason": "x"}),
    ]:
        response = page.request.post(
            f"{daphne_server.url}/tasks/{task.pk}/{path}/",
            form=form,
            headers={"X-CSRFToken": token, "HX-Request": "true"},
        )
        assert response.status == 403, (path, response.status)
    assert Task.objects.get(pk=task.pk).status == "todo" and not Event.objects.filter(actor="victor").exists()
