"""Continue from step k in the browser: pick a step in the task header, read the preview (what is reused, what
runs again, which calls may act outside, with their arguments), accept the duplicate risk with a reason."""

import pytest
from playwright.sync_api import expect

from tasks.models import Run, Step
from tests.console.continue_scenarios import five_step_task
from tests.recovery import engine as e

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_operator_previews_accepts_the_risk_with_a_reason_and_the_new_run_says_what_it_reuses(
    daphne_server, page, sign_in, org, agent, operator
):
    task = five_step_task(org)
    first = e.claim(e.first_run(task))
    e.advance(first, 5)
    e.finish(first, "failed")
    sign_in(page, "olive")
    page.goto(f"{daphne_server.url}/tasks/{task.pk}/")
    header = page.locator(f"#task-{task.pk}")
    header.get_by_label("Continue from step").select_option("3")
    header.get_by_role("button", name="Preview").click()

    title = f"Continue task #{task.pk} from step 3 of run #{first.pk}"
    expect(page.get_by_role("heading", level=1)).to_have_text(title)
    expect(page.locator(".reused")).to_contain_text("steps 1\N{EN DASH}2")
    rows = page.locator("table.runs-again-steps tbody tr.side-effect")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text("echo four >> log.txt")
    expect(rows.nth(1)).to_contain_text("echo five >> log.txt")

    # Without consent: refused on the page, nothing queued.
    page.get_by_role("button", name="Continue from step 3").click()
    expect(page.locator("p.refusal[role=alert]")).to_contain_text("accept the duplicate risk")
    assert Run.objects.filter(task=task).count() == 1

    page.get_by_label("may act outside twice").check()
    page.get_by_label("Reason for accepting the risk").fill("the log may repeat its tail")
    page.get_by_role("button", name="Continue from step 3").click()
    expect(page).to_have_url(f"{daphne_server.url}/tasks/{task.pk}/")
    run = Run.objects.filter(task=task).order_by("-id").first()
    assert run.pk != first.pk and sorted(Step.objects.filter(run=run).values_list("seq", flat=True)) == [1, 2]
    expect(page.locator("main")).to_contain_text(
        f"Continuing from step 3 in run #{first.pk} (by olive): steps 1\N{EN DASH}2 reused, steps 3\N{EN DASH}5 run "
        "again. Duplicate risk accepted: the log may repeat its tail."
    )
