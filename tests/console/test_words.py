"""Words for people (issue 20): reason codes, JSON of arguments and OS errors become sentences on every page that
shows them; the code stays in a `title`, the raw text in the step's details fold and in the API."""

import re

import pytest

from recovery.humanize import args_text, error_text, os_error_text, reason_text
from recovery.models import RecoveryAction
from tests.console.board_scenarios import failed_task, interrupted_twice
from tests.console.scenarios import unknown_outcome_action
from tests.helpers import outer_html, visible_text

pytestmark = pytest.mark.django_db

DNS = "[Errno -2] Name or service not known"


def without_folds(html: str) -> str:
    """What a page says before anyone opens a details fold (the raw text sits in those)."""
    return re.sub(r"<details\b.*?</details>", "", html, flags=re.S)


def test_a_reason_code_is_a_sentence_with_the_code_in_its_title(login, org, agent, operator):
    task = interrupted_twice(org, title="twice")
    action = RecoveryAction.objects.get(task=task, status="exhausted")
    card = outer_html(login(operator).get(f"/tasks/{task.pk}/").text, f"action-{action.pk}")
    evidence = outer_html(card, f"evidence-{action.pk}")
    assert "interrupted_twice" not in visible_text(evidence) and "·" not in visible_text(evidence)
    assert (
        '<li title="interrupted_twice" data-code="interrupted_twice">Step 1 (file_read) was interrupted in an earlier '
        "run of this chain too; it is not retried automatically again.</li>"
    ) in evidence


def test_arguments_inside_a_sentence_are_words_not_json(login, org, agent, operator):
    action = unknown_outcome_action(org)
    card = outer_html(login(operator).get(f"/tasks/{action.task_id}/").text, f"action-{action.pk}")
    evidence = visible_text(outer_html(card, f"evidence-{action.pk}"))
    assert "file_write with path “report.md”, content “# Report” was dispatched" in evidence
    assert '{"' not in evidence and '"path"' not in evidence


def test_an_os_error_is_said_in_words_on_the_run_and_task_pages_and_kept_raw_in_the_fold(login, org, agent, operator):
    task, run = failed_task(org, title="fetch the rates", error=DNS)
    client = login(operator)
    for url in (f"/agents/builder/runs/{run.pk}/", f"/tasks/{task.pk}/"):
        html = client.get(url).text
        said = visible_text(without_folds(html))
        assert "[Errno" not in said, url
        assert "the server's name could not be found (the DNS lookup failed)" in said, url
        assert DNS in html  # the worker's own words, in the step's fold
    assert client.get(f"/api/runs/{run.pk}/").json()["error_detail"] == DNS


def test_the_lease_line_says_when_the_lease_runs_out(login, org, agent, operator):
    from tests.console.scenarios import running_task

    _, run = running_task(org)
    html = login(operator).get(f"/agents/builder/runs/{run.pk}/").text
    line = visible_text(re.search(r'<p class="lease-line.*?</p>', html, re.S).group(0))
    assert "lease until" not in line and re.search(r"lease (ends|ended) ", line), line


# --- the humanizers themselves ------------------------------------------------------------------


def test_error_text_says_errno_in_words_and_leaves_other_text_alone():
    assert error_text(f"Step 2 (http_get) failed: {DNS}.") == (
        "Step 2 (http_get) failed: the server's name could not be found (the DNS lookup failed)."
    )
    assert error_text("[Errno 2] No such file or directory: '/srv/a.txt'") == "/srv/a.txt: it does not exist"
    assert error_text("<urlopen error [Errno 111] Connection refused>") == (
        "<urlopen error the server refused the connection (nothing listens there)>"
    )
    assert error_text("[Errno 9999] Something odd") == "something odd"
    assert error_text("disk full") == "disk full" and error_text("") == ""
    assert os_error_text(28, "No space left on device", "/srv/out") == "/srv/out: the disk is full"


def test_args_text_names_each_argument_and_never_prints_json():
    assert args_text({"path": "a.md", "n": 3, "force": True, "tags": [1, 2], "opts": {}}) == (
        "path “a.md”, n 3, force yes, tags 2 items, opts 0 fields"
    )
    assert args_text({}) == "no arguments" and args_text("x") == "arguments that cannot be read"
    assert args_text({"content": "x" * 500}).endswith("…”")


def test_reason_text_leads_with_the_step_only_where_the_detail_does_not_name_it():
    assert reason_text("interrupted_twice", "Interrupted twice in this chain.", 2) == (
        "Step 2: Interrupted twice in this chain."
    )
    assert reason_text("step_failed", "Step 2 (x) failed: disk full.", 2) == ("Step 2 (x) failed: disk full.")
    assert reason_text("unknown_outcome", "It may have happened.", 100002) == (
        "Item 2 of step 1: It may have happened."
    )
    assert reason_text("seq_gap", "", None) == "Seq gap."
