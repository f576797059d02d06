#!/usr/bin/env python3
"""The demo's pydantic-ai agents, served under the console by the SDK: `bin/demo_agents.py AGENT [options]`.

`make run`'s demo (recovery/demo.py) starts this script as a process of its own — the console's packages never
import the SDK or pydantic-ai — and kills it, stops its run or lets it finish, so each agent's run reaches its
state through the real engine. Each agent is an ordinary pydantic-ai `Agent` with a deterministic
`FunctionModel` (no network, no key) and real tools that read the files of the run's workspace; wrapping it is
one call, `durable(agent, modes=...)`, the same a developer makes for their own agent:

- `courier` reads the overdue invoices (`invoices_read`, replay) and sends a reminder for each
  (`reminder_send`, notify: it appends to an outbox outside the workspace — an email once sent stays sent);
  told a reminder's outcome is unknown, it checks the outbox (`outbox_check`, replay) and sends it again
  only if it did not go out;
- `analyst` reads the support tickets (`tickets_read`, replay), tallies them (`tickets_tally`, replay) and
  answers the follow-ups it is given, quoting each;
- `deployer` reads the rate limits (`limits_read`, replay); `--revised` gives it other instructions, as a
  redeployed agent would have, so a continuation of its earlier run takes another path on replay.

Serves until SIGTERM (the SDK drains: the current step ends, the lease is left or the run finished).
Environment: CONSOLE_URL, CONSOLE_WORKER_TOKEN, DEMO_OUTBOX (a directory outside every workspace; by default
var/demo-outbox).
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import sys
import time
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from recovery_console import Console, serve
from recovery_console.pydantic_ai import durable

SLOW = {"seconds": 0.0}  # how long the slow tool of each agent takes (--slow), so the demo can cut it off
WORKSPACE: dict[str, Path] = {}
# The courier's sent mail: outside every workspace (a tool cannot name the workspace files it writes).
OUTBOX = Path(
    os.environ.get("DEMO_OUTBOX") or Path(__file__).resolve().parent.parent / "var" / "demo-outbox"
)  # the claimed run's workspace (one run at a time in this process)


def workspace_file(name: str) -> Path:
    return WORKSPACE["path"] / name


def slowly() -> None:
    time.sleep(SLOW["seconds"])


def _parts(messages: list[ModelMessage], kind: str) -> list:
    return [p for m in messages if isinstance(m, ModelRequest) for p in m.parts if p.part_kind == kind]


def returned(messages: list[ModelMessage]) -> dict:
    """Each tool's latest result so far, by tool name."""
    return {p.tool_name: p.content for p in _parts(messages, "tool-return")}


def followups(messages: list[ModelMessage]) -> list[str]:
    """What people wrote after the prompt (the SDK adds each follow-up as a user prompt)."""
    return [p.content for p in _parts(messages, "user-prompt")][1:]


# --- courier: a notify tool cut off -------------------------------------------------------------------------


def _invoice_args(invoice: dict) -> dict:
    return {"to": invoice["email"], "invoice": invoice["invoice"], "amount": invoice["amount"]}


def courier_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    done = returned(messages)
    if "invoices_read" not in done:
        return ModelResponse(
            parts=[TextPart("First I read which invoices are overdue."), ToolCallPart("invoices_read", {})]
        )
    overdue = {i["invoice"]: i for i in done["invoices_read"]["overdue"]}
    # What each reminder came to, in order: sent, said to have happened by a person, or unknown (check first).
    handled, check, resend, asked = [], None, None, {}
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolCallPart):
                asked = part.args_as_dict()
            elif part.part_kind == "tool-return" and part.tool_name == "reminder_send":
                resend, check = None, None if "outcome is unknown" not in str(part.content) else asked["invoice"]
                if check is None:
                    handled.append(asked["invoice"])
            elif part.part_kind == "tool-return" and part.tool_name == "outbox_check":
                check = None
                resend = None if part.content["sent"] else asked["invoice"]
                if resend is None:
                    handled.append(asked["invoice"])
    if check:
        return ModelResponse(
            parts=[
                TextPart("The reminder may not have gone out; I check the outbox."),
                ToolCallPart("outbox_check", {"invoice": check}),
            ]
        )
    if resend:
        args = _invoice_args(overdue[resend])
        return ModelResponse(
            parts=[TextPart("It did not go out; I send it again."), ToolCallPart("reminder_send", args)]
        )
    waiting = [i for i in overdue.values() if i["invoice"] not in handled]
    if waiting:
        invoice = waiting[0]
        reason = (
            f"{len(overdue)} invoices are overdue. I remind {invoice['customer']} about invoice "
            f"{invoice['invoice']} ({invoice['amount']})."
        )
        return ModelResponse(parts=[TextPart(reason), ToolCallPart("reminder_send", _invoice_args(invoice))])
    return ModelResponse(parts=[TextPart(f"Reminded {len(handled)} customers: invoices {', '.join(handled)}.")])


courier = Agent(FunctionModel(courier_model), name="courier", instructions="Remind customers of overdue invoices.")


@courier.tool_plain
def invoices_read() -> dict:
    """The overdue invoices, from invoices.csv in the workspace."""
    overdue = []
    for line in workspace_file("invoices.csv").read_text().splitlines()[1:]:
        invoice, customer, email, amount, status = (f.strip() for f in line.split(","))
        if status == "overdue":
            overdue.append({"invoice": invoice, "customer": customer, "email": email, "amount": amount})
    return {"overdue": overdue}


@courier.tool_plain
def reminder_send(to: str, invoice: str, amount: str) -> str:
    """Email a payment reminder (appended to the outbox; sent is sent)."""
    slowly()
    OUTBOX.mkdir(parents=True, exist_ok=True)
    with open(OUTBOX / "reminders.txt", "a") as fh:
        fh.write(f"{invoice}: to {to}, {amount} is overdue\n")
    return f"reminder for {invoice} sent to {to}"


@courier.tool_plain
def outbox_check(invoice: str) -> dict:
    """Whether a reminder for `invoice` went out."""
    sent = OUTBOX / "reminders.txt"
    lines = sent.read_text().splitlines() if sent.exists() else []
    return {"invoice": invoice, "sent": any(line.startswith(f"{invoice}:") for line in lines)}


# --- analyst: stopped, then answers a follow-up -------------------------------------------------------------


def analyst_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    done = returned(messages)
    if "tickets_read" not in done:
        return ModelResponse(parts=[TextPart("I read this week's tickets."), ToolCallPart("tickets_read", {})])
    if "tickets_tally" not in done:
        count = len(done["tickets_read"]["tickets"])
        return ModelResponse(
            parts=[TextPart(f"{count} tickets. I tally them by customer."), ToolCallPart("tickets_tally", {})]
        )
    tally = done["tickets_tally"]
    top, most = tally["by_customer"][0]  # a list, most first (an object's keys may come back in another order)
    text = f"{tally['total']} tickets from {len(tally['by_customer'])} customers; {top} opened the most ({most})."
    for question in followups(messages):
        text += f' You asked: "{question}" {top} first: {most} of the {tally["total"]} tickets are theirs.'
    return ModelResponse(parts=[TextPart(text)])


analyst = Agent(FunctionModel(analyst_model), name="analyst", instructions="Summarise the support tickets.")


@analyst.tool_plain
def tickets_read() -> dict:
    """The tickets, one `customer: text` a line of tickets.txt in the workspace."""
    lines = workspace_file("tickets.txt").read_text().splitlines()
    return {"tickets": [dict(zip(("customer", "text"), line.split(": ", 1), strict=True)) for line in lines if line]}


@analyst.tool_plain
def tickets_tally() -> dict:
    """How many tickets each customer opened, most first."""
    slowly()
    customers = [line.split(": ", 1)[0] for line in workspace_file("tickets.txt").read_text().splitlines() if line]
    return {"total": len(customers), "by_customer": collections.Counter(customers).most_common()}


# --- deployer: redeployed with other instructions, its replay diverges ---------------------------------------

INSTRUCTIONS = "Raise the API rate limits on staging."
REVISED = "Raise the API rate limits on staging and production."


def deployer_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    done = returned(messages)
    if "limits_read" not in done:
        return ModelResponse(parts=[TextPart("I read the current limits."), ToolCallPart("limits_read", {})])
    return ModelResponse(parts=[TextPart(f"The limits now: {done['limits_read']}. They can be raised to 2x.")])


def deployer(instructions: str) -> Agent:
    agent = Agent(FunctionModel(deployer_model), name="deployer", instructions=instructions)

    @agent.tool_plain
    def limits_read() -> str:
        """The rate limits, from limits.toml in the workspace."""
        slowly()
        return workspace_file("limits.toml").read_text()

    return agent


MODES = {
    "courier": {"invoices_read": "replay", "reminder_send": "notify", "outbox_check": "replay"},
    "analyst": {"tickets_read": "replay", "tickets_tally": "replay"},
    "deployer": {"limits_read": "replay"},
}


def in_workspace(fn):
    """`fn` (a `durable` agent) with the claimed run's workspace where the tools find their files."""

    def run(claimed):
        WORKSPACE["path"] = Path(claimed.workspace)
        return fn(claimed)

    run.tools = fn.tools
    return run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("agent", choices=sorted(MODES))
    parser.add_argument("--slow", type=float, default=0.0, help="Seconds the agent's slow tool takes.")
    parser.add_argument("--revised", action="store_true", help="The deployer's revised instructions.")
    args = parser.parse_args(argv)
    SLOW["seconds"] = args.slow
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per claim poll
    agent = {"courier": courier, "analyst": analyst}.get(args.agent) or deployer(
        REVISED if args.revised else INSTRUCTIONS
    )
    with Console(os.environ["CONSOLE_URL"], os.environ["CONSOLE_WORKER_TOKEN"]) as console:
        fn = in_workspace(durable(agent, modes=MODES[args.agent]))
        serve(console, args.agent, fn, poll_seconds=0.2, drain_seconds=3, label=f"demo-{args.agent}")


if __name__ == "__main__":
    main()
