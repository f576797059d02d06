"""Shared by test modules (from test_agent_recovery.py): no test module imports another."""

from recovery.models import RecoveryAction
from recovery.supervisor.loop import supervise_once
from tests.agents_api import Agent, model_args, prompt_task
from tests.recovery import engine


def parked(runner, api):
    """An agent run with the history above, cut off in its notify-mode file_write (step 6): its action."""
    task = prompt_task(api)
    agent = Agent.claims(runner)
    history(agent)
    agent.cut_off(6, *WRITE)
    crash_and_supervise()
    action = RecoveryAction.objects.get(run_id=agent.run)
    assert action.kind == "unknown_outcome" and action.seq == 6
    return task, agent, action


def crash_and_supervise():
    engine.lapse()
    return supervise_once()


def history(agent: Agent) -> None:
    """Steps 1 to 5 of an agent's conversation: two model turns, a read, a failed call, a third turn."""
    agent.turn(1, {"messages": ["hi"]}, "read a.md")
    agent.call(2, "file_read", {"path": "a.md"}, {"content": "A"})
    agent.turn(3, {"messages": ["hi", "A"]}, "try the api", tokens=(300, 40))
    agent.call(4, "http_get", {"url": "https://example.invalid"}, ok=False)
    agent.turn(5, {"messages": ["hi", "A", "failed"]}, "write it down")


WRITE = ("file_write", {"path": "notes.md", "content": "# Notes"})


def diverge(runner, api):
    """An agent run cut off at step 3 whose continuation replayed into another call at step 2: (task, agent)."""
    task = prompt_task(api)
    first = Agent.claims(runner)
    first.turn(1, {"m": 1}, "read a")
    first.call(2, "file_read", {"path": "a.md"})
    first.cut_off(3, "model", model_args({"m": 3}))
    crash_and_supervise()
    second = Agent.claims(runner)
    body = {
        "error_code": "diverged",
        "detail": "step 2 asked file_read b.md",
        "diverged": {
            "seq": 2,
            "saved": {"tool": "file_read", "args": {"path": "a.md"}},
            "asked": {"tool": "file_read", "args": {"path": "b.md"}},
        },
    }
    r = second.finish("failed", **body)
    assert r.status_code == 200 and r.json()["status"] == "failed" and r.json()["error_code"] == "diverged"
    return task, second
