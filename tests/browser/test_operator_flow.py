"""An operator recovers an unknown-outcome write in the browser: a real worker killed mid-step, a real continuation."""

import re
import signal

import pytest
from playwright.sync_api import expect

from recovery.models import RecoveryAction, RecoveryAttempt
from recovery.supervisor.loop import supervise_once
from tasks.models import Run, Step
from tasks.services import task_create
from tests.browser.pages import board_row_pushed, expect_live, reload_until
from tests.factories import worker_token
from tests.helpers import plan
from tests.processes import ROOT, lapse_and_supervise, start_worker

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = ROOT / "docs" / "screenshots"


def test_an_operator_decides_an_unknown_write_and_watches_it_continue(
    daphne_server, page, sign_in, org, agent, operator
):
    # The operator's board is open while the work runs and breaks.
    sign_in(page, "olive")
    expect_live(page)
    token = worker_token(org)
    task = task_create(
        org=org,
        actor="t",
        title="Write the weekly report",
        agent="builder",
        input=plan(
            ("file_write", {"path": "a.txt", "content": "a"}),
            ("file_write", {"path": "report.md", "content": "# Report"}),
            ("file_read", {"path": "report.md"}),
        ),
    )
    worker = start_worker(daphne_server, token, fault="crash_after_dispatch:2@1")
    out, _ = worker.communicate(timeout=90)
    assert worker.returncode == -signal.SIGKILL, out
    first = Run.objects.get(task=task)
    lapse_and_supervise(first)
    action = RecoveryAction.objects.get(task=task)
    assert action.kind == "unknown_outcome" and action.status == "open"
    dispatched = Step.objects.get(run=first, seq=2).dispatched_at

    board_row_pushed(page, task.pk, "Needs decision")
    page.get_by_role("link", name="Needs decision").click()
    expect(page).to_have_url(re.compile(r"state=needs_decision"))
    row = page.locator(f"#task-{task.pk}")
    expect(row).to_contain_text("Needs decision")
    expect(page.locator("#board-rows tr")).to_have_count(1)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "board.png"))

    row.get_by_role("link", name="Write the weekly report").click()
    expect(page).to_have_url(re.compile(rf"/tasks/{task.pk}/$"))
    card = page.locator(f"#action-{action.pk}")
    expect(card).to_contain_text("Unknown outcome")
    expect(card.locator("code.tool")).to_have_text("file_write")
    expect(card.locator("pre.args")).to_contain_text("report.md")
    # The dispatch time reads as relative text; the exact time is in the <time> element.
    expect(card.locator(f'time[datetime="{dispatched.isoformat()}"]')).to_have_count(1)
    expect(card).not_to_contain_text("Retry requested")
    expect_live(page)
    page.screenshot(path=str(SCREENSHOTS / "task.png"))

    card.get_by_label("What did you find?").fill("checked the workspace: report.md is not there")
    card.get_by_label("I accept that running it again may do it twice").check()
    card.get_by_role("button", name="It did not happen — run it again").click()
    expect(card).to_contain_text("Decision recorded: it did not happen", timeout=10_000)
    expect(card).to_contain_text("duplicate risk accepted")
    expect(card).not_to_contain_text("Continuing")
    expect(card).not_to_contain_text("Retry")
    expect(card.locator(".refusal")).to_have_count(0)
    attempt = RecoveryAttempt.objects.get(action=action)
    assert attempt.decision == "not_performed" and attempt.accepted_duplicate_risk
    assert attempt.note == "checked the workspace: report.md is not there"
    continuation = attempt.continuation_run
    assert continuation.status == "queued"

    # A reload still says only what is true: decided and queued, not resumed.
    page.reload()
    expect(card).to_contain_text(f"Run #{continuation.pk} queued — step 2 will run again.")
    expect(card).not_to_contain_text("Continu")

    worker = start_worker(daphne_server, token)
    try:
        seen = reload_until(
            page,
            card,
            re.compile(rf"Continu(ing|ed) in run #{continuation.pk}"),
            timeout=60,
            tick=supervise_once,
        )
        out, _ = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert worker.returncode == 0, out
    assert "Retry" not in seen

    supervise_once()
    page.reload()
    header = page.locator(f"#task-{task.pk}")
    expect(header).to_have_attribute("data-state", "done")
    expect(header.locator(".badge")).to_have_text("Done")
    expect(card).to_contain_text(f"Continued in run #{continuation.pk}")
    expect(card).to_contain_text("succeeded")
    continuation.refresh_from_db()
    action.refresh_from_db()
    assert continuation.status == "succeeded"
    assert action.status == "resolved" and action.resolution == "continued"
    assert Run.objects.filter(task=task).count() == 2 and RecoveryAttempt.objects.count() == 1
