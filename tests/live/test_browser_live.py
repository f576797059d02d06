"""Live pages in a real browser: two tabs stay in step, and a page survives a server restart."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from recovery.models import RecoveryAction
from recovery.supervisor.loop import supervise_once
from tasks.events import last_event_id
from tasks.models import Run
from tasks.services import leases_expire, task_create
from tests.console.scenarios import WRITE_PLAN, checkpoint, claim, unknown_outcome_action
from tests.live.browser_pages import WAIT, open_live, signed_in
from tests.processes import Server, free_port

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


# Record every text of the indicator and every status of each card, so a test can
# tell what the page showed on the way, not only where it ended.
RECORDER = """() => {
  window.__sameDocument = true;
  window.__indicator = [];
  window.__statuses = {};
  const note = () => {
    const text = document.getElementById("live-indicator").textContent;
    if (window.__indicator.at(-1) !== text) window.__indicator.push(text);
    for (const el of document.querySelectorAll("[id^=run-], [id^=action-]")) {
      const seen = (window.__statuses[el.id] ||= []);
      if (seen.at(-1) !== el.dataset.status) seen.push(el.dataset.status);
    }
  };
  const all = {subtree: true, childList: true, attributes: true, characterData: true};
  new MutationObserver(note).observe(document.body, all);
  note();
}"""

CARDS = """() => Array.from(
  document.querySelectorAll("main [id^=task-], main [id^=run-], main [id^=action-]"),
  (el) => [el.id, el.outerHTML],
)"""


def normalize(html: str) -> str:
    """A card as drawn: whitespace, the out-of-band marker and the per-request CSRF input do not count."""
    html = re.sub(r'<input type="hidden" name="csrfmiddlewaretoken" value="[^"]*">', "", html)
    html = re.sub(r'\s*hx-swap-oob="[^"]*"', "", html)
    # Relative times ("14 sec ago") move on by themselves; the moment is in `datetime`.
    html = re.sub(r"(<time\b[^>]*>)[^<]*(</time>)", r"\1\2", html)
    return re.sub(r"\s+", " ", re.sub(r">\s+<", "><", html)).strip()


def cards_of(page) -> dict[str, str]:
    return {element_id: normalize(html) for element_id, html in page.evaluate(CARDS)}


def test_a_decision_in_one_tab_appears_in_another_without_a_reload(
    chromium, daphne_server, org, agent, operator, viewer
):
    action = unknown_outcome_action(org)
    path = f"/tasks/{action.task_id}/"
    operator_context, viewer_context = (
        signed_in(chromium, daphne_server, operator),
        signed_in(chromium, daphne_server, viewer),
    )
    try:
        tab_a = open_live(operator_context, path)
        tab_b = open_live(viewer_context, path)
        tab_b.evaluate(RECORDER)
        card_b = tab_b.locator(f"#action-{action.pk}")
        expect(card_b).to_contain_text("Needs decision")
        expect(card_b).to_contain_text("acting on it needs the operator role")

        card_a = tab_a.locator(f"#action-{action.pk}")
        card_a.get_by_label("I accept that running it again may do it twice").check()
        card_a.get_by_role("button", name="It did not happen — run it again").click()
        expect(card_a).to_contain_text("Decision recorded", timeout=WAIT)

        expect(card_b).to_contain_text("Decision recorded", timeout=WAIT)
        expect(card_b).to_have_attribute("data-status", "retrying")
        expect(card_b.get_by_role("button")).to_have_count(0)  # drawn for the viewer's own role
        # The continuation the decision queued is appended to tab B's run chain, once.
        continuation = Run.objects.get(continues_id=action.run_id)
        expect(tab_b.locator(f"#chain-{action.task_id} #run-{continuation.pk}")).to_have_count(1, timeout=WAIT)
        expect(tab_b.locator(f"#run-{continuation.pk}")).to_have_attribute("data-status", "queued")
        expect(tab_b.locator("#live-cursor")).to_have_attribute("data-last-event", str(last_event_id()), timeout=WAIT)
        assert tab_b.evaluate("window.__sameDocument") is True  # updated in place, not reloaded

        # What tab B drew from pushed fragments is what a reload draws.
        live_cards = cards_of(tab_b)
        tab_b.reload()
        expect(tab_b.locator("#live-indicator")).to_have_text("Live", timeout=WAIT)
        assert live_cards == cards_of(tab_b)
        assert tab_a.errors == [] and tab_b.errors == []
    finally:
        operator_context.close()
        viewer_context.close()


def test_a_page_reconnects_after_a_restart_shows_saved_state_and_draws_what_a_reload_draws(
    chromium, org, agent, operator
):
    # A run whose worker dispatched `file_write report.md` and is still holding its lease.
    task = task_create(org=org, actor="t", title="write the report", agent="builder", input=WRITE_PLAN)
    run = claim(task)
    checkpoint(run, 1)

    port = free_port()
    server = Server(port=port).start()
    context = signed_in(chromium, server, operator)
    try:
        page = open_live(context, f"/tasks/{task.pk}/")
        indicator = page.locator("#live-indicator")
        expect(page.locator(f"#run-{run.pk}")).to_have_attribute("data-status", "running")
        page.evaluate(RECORDER)

        server.stop()
        expect(indicator).to_have_text(
            re.compile("Reconnecting — next try at|Server unreachable — next try at"), timeout=WAIT
        )

        # While no server runs: the lease lapses, the supervisor interrupts the run and opens a
        # decision, and the decision's due time passes, so it is exhausted.
        leases_expire(now=timezone.now() + timedelta(hours=1))
        supervise_once()
        run.refresh_from_db()
        assert run.status == "interrupted"
        action = RecoveryAction.objects.get(task=task)
        assert action.status == "open"
        RecoveryAction.objects.filter(pk=action.pk).update(due_at=timezone.now() - timedelta(minutes=1))
        supervise_once()
        action.refresh_from_db()
        assert action.status == "exhausted"
        assert Run.objects.filter(task=task).count() == 1  # nothing resumed by itself

        server = Server(port=port).start()
        expect(indicator).to_have_text("Live", timeout=20_000)
        expect(page.locator("#live-notice")).to_contain_text("Live updates reconnected", timeout=WAIT)
        expect(page.locator("#live-notice")).to_contain_text("Reconnecting does not restart the agent.")
        expect(page.locator("#live-notice")).to_be_visible()
        run_card = page.locator(f"#run-{run.pk}")
        expect(run_card).to_have_attribute("data-status", "interrupted", timeout=WAIT)
        expect(run_card).to_contain_text("Interrupted")
        action_card = page.locator(f"#action-{action.pk}")
        expect(action_card).to_have_attribute("data-status", "exhausted", timeout=WAIT)
        expect(page.locator(f"#task-{task.pk}")).not_to_contain_text("running")

        expect(page.locator("#live-cursor")).to_have_attribute("data-last-event", str(last_event_id()), timeout=WAIT)
        assert page.evaluate("window.__sameDocument") is True
        shown = page.evaluate("window.__indicator")
        assert any(text.startswith("Reconnecting") for text in shown), shown
        assert shown[-1] == "Live"
        statuses = page.evaluate("window.__statuses")
        # The run card went from running straight to interrupted: never succeeded, never running again.
        assert statuses[f"run-{run.pk}"] == ["running", "interrupted"], statuses
        assert "succeeded" not in str(statuses)

        reconnected = cards_of(page)
        assert {f"task-{task.pk}", f"run-{run.pk}", f"action-{action.pk}"} <= set(reconnected)
        page.reload()
        expect(indicator).to_have_text("Live", timeout=WAIT)
        reloaded = cards_of(page)
        assert reconnected.keys() == reloaded.keys()
        for element_id in reloaded:
            assert reconnected[element_id] == reloaded[element_id], element_id
        assert page.errors == []
    finally:
        context.close()
        server.stop()
