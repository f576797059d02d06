"""The recovery breaker on pages: the header's warning on every page, its page with the tasks it holds, an
admin's close by form, and a held task that says why it waits."""

import html

import pytest

from recovery.models import RecoveryBreaker
from tests.recovery.breaker_storm import trip

pytestmark = pytest.mark.django_db

SAID = "Automatic recovery paused for builder: 4 tasks failed with `sleep` / `lease_lapsed` in under a minute."


def text(response) -> str:
    return html.unescape(response.content.decode())


def test_every_page_warns_with_the_breakers_sentence_and_links_to_it(org, agent, settings, viewer, login):
    b, runs = trip(org, settings)
    c = login(viewer)
    for url in ("/", "/inbox/", f"/tasks/{runs[3].task_id}/", "/workers/"):
        page = text(c.get(url))
        assert SAID in page, url
        assert f'href="/breakers/{b.pk}/"' in page, url


def test_a_held_task_says_the_breaker_holds_it_never_that_the_supervisor_takes_it_up(
    org, agent, settings, viewer, login
):
    b, runs = trip(org, settings)
    page = text(login(viewer).get(f"/tasks/{runs[3].task_id}/"))
    assert f"Run #{runs[3].pk} waits: recovery breaker #{b.pk} paused automatic recovery of this agent." in page
    assert "is taken up by the supervisor on its next pass" not in page
    board = text(login(viewer).get("/"))
    assert f"recovery breaker #{b.pk} paused automatic recovery" in board


def test_the_breaker_page_lists_the_tasks_it_counted_and_offers_close_to_admins_only(
    org, agent, settings, operator, admin_user, login
):
    b, runs = trip(org, settings)
    page = text(login(operator).get(f"/breakers/{b.pk}/"))
    assert SAID in page and "4 tasks it counted" in page
    for r in runs:
        assert f'href="/tasks/{r.task_id}/"' in page
    assert "Close the breaker" not in page
    assert "Close the breaker" in text(login(admin_user).get(f"/breakers/{b.pk}/"))
    listing = text(login(operator).get("/breakers/"))
    assert f'id="breaker-{b.pk}"' in listing and "sleep / lease_lapsed" in listing


def test_an_admin_closes_it_by_form_with_a_reason_and_the_warning_goes(
    org, agent, settings, admin_user, operator, login
):
    b, _ = trip(org, settings)
    admin = login(admin_user, csrf=True)
    page = admin.get(f"/breakers/{b.pk}/")
    token = page.cookies["csrftoken"].value if "csrftoken" in page.cookies else admin.cookies["csrftoken"].value

    refused = login(operator).post(f"/breakers/{b.pk}/close/", {"reason": "ok"})
    assert refused.status_code == 403 and "This needs the admin role" in text(refused)

    missing = admin.post(f"/breakers/{b.pk}/close/", {"reason": " ", "csrfmiddlewaretoken": token})
    assert missing.status_code == 400 and "a reason is required" in text(missing)
    assert RecoveryBreaker.objects.get().state == "open"

    done = admin.post(f"/breakers/{b.pk}/close/", {"reason": "provider is back", "csrfmiddlewaretoken": token})
    assert done.status_code == 302 and done["Location"] == f"/breakers/{b.pk}/"
    after = text(admin.get(done["Location"]))
    assert "Closed by ada: provider is back" in after
    assert SAID not in text(admin.get("/"))


def test_an_open_action_of_the_held_agent_names_the_breaker_as_its_gate_and_its_retry_is_refused(
    org, agent, settings, operator, login
):
    from tests.console.scenarios import unknown_outcome_action

    action = unknown_outcome_action(org, title="write the report")
    b, _ = trip(org, settings)
    page = text(login(operator).get(f"/tasks/{action.task_id}/"))
    assert f"{SAID} (breaker #{b.pk})" in page
    refused = login(operator).post(f"/actions/{action.pk}/retry/", {"version": str(action.version)})
    assert refused.status_code == 409 and SAID in text(refused)


def test_the_navigation_links_to_the_breakers_list_with_none_open(org, agent, operator, admin_user, login):
    for person in (operator, admin_user):
        board = login(person).get("/").content.decode()
        assert '<a href="/breakers/">Breakers</a>' in board
        listing = login(person).get("/breakers/").content.decode()
        assert '<a href="/breakers/" aria-current="page">Breakers</a>' in listing
