"""Shared test helpers: snapshots of persisted state, plans, claims."""

from tasks.models import Event, Run, Step, Task


def snapshot(run_id: int) -> dict:
    """Everything a runner write could change, for before/after comparison."""
    run = Run.objects.filter(pk=run_id).values().first()
    return {
        "run": run,
        "steps": list(Step.objects.filter(run_id=run_id).order_by("seq").values()),
        "events": Event.objects.count(),
        "task": Task.objects.filter(pk=run["task_id"]).values().first() if run else None,
    }


def plan(*steps) -> dict:
    return {"steps": [{"tool": t, "args": a} for t, a in steps]}


def create_task(api, title="t", agent="builder", steps=None, **extra):
    body = {"title": title, "agent": agent, "input": steps or plan(("sleep", {"seconds": 0})), **extra}
    response = api.post("/api/tasks/", body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def claim(runner, label="w1-a"):
    response = runner.post("/api/runner/claim/", {"worker": label}, format="json")
    assert response.status_code in (200, 204), response.content
    return response.json() if response.status_code == 200 else None
