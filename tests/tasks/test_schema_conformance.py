"""schemathesis against /api/schema/: generated requests to every operation, then stateful sequences along the
links it infers from the response schemas — no 5xx, and every response is one the schema documents (status,
content type, body). Bounded: a few examples per operation, so it runs in seconds on either database.

The app is called in-process through Django's WSGI handler (the same middleware and views daphne serves).
"""

import pytest
import schemathesis
from django.core.wsgi import get_wsgi_application
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.console.scenarios import unknown_outcome_action
from tests.factories import user_token, worker_token
from tests.helpers import plan

pytestmark = pytest.mark.django_db

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
EXAMPLES = 6
BOUNDED = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,  # the same requests every run: a failure here is reproducible, never flaky
    suppress_health_check=list(HealthCheck),
)


# The schema itself needs no database: drf-spectacular draws it from the views.
schema = schemathesis.openapi.from_wsgi("/api/schema/", get_wsgi_application())


@pytest.fixture
def tokens(db, org, agent, admin_user):
    """A scenario to hit (tasks, a run with steps, an unknown-outcome action) and the tokens to hit it with.

    Requests run inside the test's transaction, as Django's test client runs them: the WSGI handler's
    end-of-request connection cleanup is held off meanwhile (it would drop the connection mid-transaction).
    """
    from django.core import signals
    from django.db import close_old_connections

    from tasks.services import task_create

    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)

    unknown_outcome_action(org)
    task_create(org=org, actor="t", title="plain", agent="builder", input=plan(("sleep", {"seconds": 0})))
    yield {"person": user_token(admin_user), "worker": worker_token(org, "fuzz")}
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


def headers_for(case, tokens) -> dict:
    who = "worker" if case.path.startswith("/api/runner/") else "person"
    return {"Authorization": f"Token {tokens[who]}"}


@schema.parametrize()
@BOUNDED
def test_every_operation_answers_what_the_schema_says(case, tokens):
    case.call_and_validate(headers=headers_for(case, tokens), checks=CHECKS)


def test_stateful_sequences_along_the_inferred_links_answer_what_the_schema_says(tokens):
    """Create a task, read it back, act on it, read its run and actions: each step's inputs come from an earlier
    response (links schemathesis infers from the response schemas), so the calls reach real objects, not 404s."""
    workflow = schema.as_state_machine()
    assert workflow.bundles, "schemathesis inferred no links: the response schemas name no ids to follow"

    calls: list[tuple[str, str, int]] = []

    class Workflow(workflow):
        def get_call_kwargs(self, case):
            return {"headers": headers_for(case, tokens)}

        def validate_response(self, response, case, additional_checks=None, **kwargs):
            calls.append((case.method, case.path, response.status_code))
            case.validate_response(response, checks=CHECKS, transport_kwargs=kwargs)

    Workflow.run(
        settings=settings(
            max_examples=30,
            stateful_step_count=6,
            deadline=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
    )
    assert calls, "the state machine made no call"
