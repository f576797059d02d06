"""The demo's workspace scenarios run through the real engine: real workers over HTTP, a real crash."""

import pytest

from recovery.demo import DEMO_LEASE_SECONDS, EmbeddedServer, _plan, _settle, workspace_scenarios
from recovery.models import RecoveryAction
from recovery.supervisor.loop import supervise_once
from tasks.models import Task
from tasks.services import task_create
from tests.factories import worker_token

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_the_demo_reaches_a_workspace_divergence_and_a_failed_export(org, agent, export_root):
    token = worker_token(org, "demo-worker")
    said = []
    with EmbeddedServer() as server:

        def make(title, agent_name, *steps, **extra):
            return task_create(org=org, actor="demo", title=title, agent=agent_name, input=_plan(*steps), **extra)

        def settle(task: Task):
            run = _settle(task.runs.order_by("-id").first(), timeout=DEMO_LEASE_SECONDS * 10)
            supervise_once()
            return run

        made = workspace_scenarios(
            make,
            lambda fault="": server.worker(token, fault=fault),
            settle,
            lambda t, w: said.append(w),
            exports=export_root,
        )
    diverged = RecoveryAction.objects.get(task=made["diverged"], kind="workspace_validation", status="open")
    statuses = {f["path"]: f["status"] for f in diverged.evidence["files"]}
    assert statuses == {"CHANGELOG.md": "changed", "RELEASE-DATE": "added"}
    assert {f["path"]: f["plan"] for f in diverged.evidence["files"]}["CHANGELOG.md"] == [4]
    assert diverged.run.error_code == "workspace_validation_failed"
    export = RecoveryAction.objects.get(task=made["export"], kind="workspace_export", status="open")
    assert str(made["blocker"]) in export.evidence["destination"]
    made["blocker"].unlink()
    assert len(said) == 2
