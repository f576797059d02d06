"""Deciding in bulk that the agent verifies: agent runs are handed their unknown outcome, scripted plans are
refused with the reason, and the task's card says who handed it over."""

import pytest
from django.test import Client

from recovery.bulk.operations import bulk_advance, bulk_execute, bulk_preview
from recovery.models import BulkItem, RecoveryAction, RecoveryAttempt
from tests.agents_api import Agent
from tests.factories import make_agent
from tests.recovery.agent_scenarios import parked
from tests.recovery.bulk_scenarios import unknown_outcomes

pytestmark = pytest.mark.django_db

PARAMS = {"outcome": "agent_verifies", "note": "let it look at notes.md"}


def test_bulk_agent_verifies_hands_agent_runs_their_unknown_outcome_and_refuses_scripted_plans(
    org, agent, operator, api, runner
):
    make_agent(org, "coder")
    task, _, handed = parked(runner, api)
    scripted = unknown_outcomes(org, 1)[0]
    ids = [task["id"], scripted.task_id]

    op = bulk_preview(user=operator, action="decide", ids=ids, params=PARAMS)
    assert op.refusals == {"not_agent_run": 1}  # said before anything happens
    bulk_execute(user=operator, op_id=op.pk, scope_hash=op.scope_hash)
    bulk_advance(budget=10)

    items = {i.task_id: (i.result, i.reason) for i in BulkItem.objects.filter(op=op)}
    assert items[scripted.task_id] == ("skipped", "not_agent_run")
    assert RecoveryAction.objects.get(pk=scripted.pk).status == "open"
    assert items[task["id"]][0] == "applied"
    attempt = RecoveryAttempt.objects.get(action=handed)
    assert attempt.decision == "agent_verifies" and attempt.note == PARAMS["note"]
    # The continuation tells the agent, with the person who decided and their note.
    notice = Agent.claims(runner).claim["notices"][0]
    assert (notice["decision"], notice["decided_by"], notice["note"]) == ("agent_verifies", "olive", PARAMS["note"])


def test_the_boards_bulk_decision_offers_the_agent_verifies(org, operator):
    client = Client()
    client.force_login(operator)
    page = client.get("/").content.decode()
    assert 'name="outcome" value="agent_verifies"' in page and "The agent verifies (agent runs)" in page
