"""An agent's conversation over three runs, built through the runner and operator APIs as an SDK agent drives them.

Run 1: the model reads a.md, then asks to write notes.md; the worker dies in that write (unknown outcome).
A person hands it to the agent to verify and writes a follow-up. Run 2 replays turns 1 and 3 and call 2
without calling them, gets the notice for step 4, reads the follow-up, checks, writes notes.md again
(a new step), and dies in its next model turn. Run 3 (continued by the supervisor: a model turn is replayed)
reuses everything, calls the cut-off turn again and returns its output.
"""

import time
from dataclasses import dataclass

from django.conf import settings

from recovery.models import RecoveryAction
from recovery.supervisor.loop import supervise_once
from tests.agents_api import Agent, model_args, prompt_task
from tests.recovery import engine

PROMPT = "Write the release notes for 1.4 into notes.md, from a.md."
REASON = "a.md lists two changes. I will write them into notes.md now."
LONG = "\n".join(f"Line {i} of what the model thought about the release." for i in range(1, 15))
FOLLOW_UP = "Mention the login fix too, please."
# An unbroken word longer than a phone is wide: the page wraps it rather than scrolling sideways.
URL = "https://example.invalid/changelog/" + "login-no-longer-times-out-" * 6
WRITE = ("file_write", {"path": "notes.md", "content": "# 1.4\n- sync is faster\n"})


@dataclass
class Chain:
    task: int
    action: RecoveryAction
    first: int
    second: int
    third: int


def lapse_leases_and_supervise():
    if settings.CONSOLE_LEASE_SECONDS <= 5:
        # A lease this short lapses for real: the pages then say when the run ended, never "from now".
        time.sleep(settings.CONSOLE_LEASE_SECONDS + 0.3)
    else:
        engine.lapse()
    return supervise_once()


def decide(api, action, outcome, note=""):
    version = api.get(f"/api/actions/{action.pk}/").json()["version"]
    r = api.post(f"/api/actions/{action.pk}/decision/", {"version": version, "outcome": outcome, "note": note},
                 format="json")  # fmt: skip
    assert r.status_code == 200, r.content
    return r.json()


def parked(api, runner) -> tuple[dict, Agent, RecoveryAction]:
    """Run 1, cut off in its notify-mode write: the task, its agent and the open unknown-outcome action."""
    task = prompt_task(api, PROMPT)
    first = Agent.claims(runner)
    first.turn(1, {"messages": [PROMPT]}, "I will read a.md first.", tokens=(100, 20))
    first.call(2, "file_read", {"path": "a.md"}, {"content": "- sync is faster\n- login no longer times out\n"})
    first.turn(3, {"messages": [PROMPT, "a.md"]}, REASON, tokens=(300, 40))
    first.cut_off(4, *WRITE)
    lapse_leases_and_supervise()
    action = RecoveryAction.objects.get(run_id=first.run, kind="unknown_outcome")
    return task, first, action


def three_runs(api, runner) -> Chain:
    task, first, action = parked(api, runner)
    assert api.post(f"/api/tasks/{task['id']}/messages/", {"body": FOLLOW_UP}, format="json").status_code == 201
    decide(api, action, "agent_verifies", note="check notes.md before writing it again")
    second = Agent.claims(runner)
    ids = [m["id"] for m in second.claim["messages"]]
    assert ids and second.post("messages/ack/", {"ids": ids}).status_code == 200
    second.turn(5, {"messages": [PROMPT, "a.md", "notice", FOLLOW_UP]}, LONG, tokens=(500, 30))
    second.call(6, "file_check", {"path": "notes.md", "source": URL}, {"exists": False})
    second.turn(
        7, {"messages": ["…", "missing"]}, f"notes.md is missing: writing it again. See {URL}", tokens=(600, 25)
    )
    second.call(8, *WRITE)
    second.cut_off(9, "model", model_args({"messages": ["…", "written"]}))
    report = lapse_leases_and_supervise()
    assert report.continued, report
    third = Agent.claims(runner)
    third.turn(9, {"messages": ["…", "written"]}, "Done.", tokens=(700, 50))
    r = third.finish(output={"summary": "notes.md written", "changes": ["sync is faster", "login fix"]})
    assert r.status_code == 200, r.content
    return Chain(task["id"], action, first.run, second.run, third.run)
