"""An agent run read as its conversation (DESIGN §13), and what recovery saved and cost, from saved facts.

Pure, like recovery/words/: the callers pass loaded rows (the task's runs with their `step_list` and
`carried_messages`, the diagnosis verdicts) and nothing here queries. Words come from the presenter where it
has them (a step's verdict, a notice, a follow-up's state); the rest are composed here, once.

A model turn's response is whatever the agent's framework returned; `model_reply` reads the shapes in use (the
SDK's own `{"text"|"call"}`, pydantic-ai's `parts`, Anthropic's `content` blocks, OpenAI's `choices` and
`output`) for its text and the calls it named. The calls a turn asked for are the tool steps that follow it.
"""

import json
from dataclasses import dataclass, field
from datetime import datetime

from recovery.words.agent_runs import SETTING_WORDS, call_text, notice_row, notice_text
from recovery.words.followups import followup_line
from recovery.words.lines import At, Line, Said
from recovery.words.runs import StepRow, duration, step_row
from tasks.batches import NESTED_BASE

MODEL = "model"
FOLD_CHARS = 600  # a text longer than this (or of more lines than FOLD_LINES) folds into <details>
FOLD_LINES = 8
MAX_ITEMS = 40  # key: value rows shown of one value; the API has the rest
VALUE_CHARS = 4000  # one value's text, cut beyond this


# --- reading values as people do ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Text:
    """A text as the page shows it: whole, or folded under its first line when long."""

    text: str
    folded: bool
    head: str


def text_of(value: str, limit: int = VALUE_CHARS) -> Text:
    value = value if len(value) <= limit else value[:limit] + "… (cut; the API has it whole)"
    lines = value.splitlines()
    folded = len(value) > FOLD_CHARS or len(lines) > FOLD_LINES
    first = lines[0] if lines else ""
    head = first if len(first) <= 80 else first[:79] + "…"
    return Text(value, folded, head)


def _scalar(value) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        return f"{value:,}" if isinstance(value, int) and abs(value) >= 10_000 else str(value)
    return str(value)


@dataclass(frozen=True)
class Item:
    key: str
    value: Text


def items_of(value, *, limit: int = MAX_ITEMS) -> tuple[list[Item], int]:
    """A JSON value as `key: value` rows (nested keys joined with dots, list positions from 1), and how many
    rows were left off. A bare string or number is one row with an empty key."""
    rows: list[tuple[str, str]] = []

    def walk(key: str, v) -> None:
        if isinstance(v, dict) and v:
            for k, sub in v.items():
                walk(f"{key}.{k}" if key else str(k), sub)
        elif isinstance(v, list) and v and not all(isinstance(x, str | int | float | bool) for x in v):
            for i, sub in enumerate(v, 1):
                walk(f"{key} {i}" if key else str(i), sub)
        elif isinstance(v, list):
            rows.append((key, ", ".join(_scalar(x) for x in v) if v else "(empty list)"))
        elif isinstance(v, dict):
            rows.append((key, "(empty)"))
        else:
            rows.append((key, _scalar(v)))

    walk("", value)
    return [Item(k, text_of(v)) for k, v in rows[:limit]], max(0, len(rows) - limit)


def _json_args(args):
    """Tool-call arguments some frameworks keep as a JSON string: read back into their value."""
    if isinstance(args, str):
        try:
            return json.loads(args)
        except ValueError:
            return args
    return args


@dataclass(frozen=True)
class Reply:
    text: str
    calls: tuple[tuple[str, object], ...]  # (tool name, args) named in the response


def model_reply(result) -> Reply:
    """A model turn's text and the calls it named, from its saved response (see the module's note)."""
    texts: list[str] = []
    calls: list[tuple[str, object]] = []
    if isinstance(result, str):
        return Reply(result, ())
    if not isinstance(result, dict):
        return Reply("", ())
    # pydantic-ai ModelResponse: {"parts": [{"part_kind": "text"|"tool-call"|"thinking", ...}]}
    for part in result.get("parts") or []:
        if not isinstance(part, dict):
            continue
        kind = part.get("part_kind")
        if kind == "text" and isinstance(part.get("content"), str):
            texts.append(part["content"])
        elif kind == "tool-call" and part.get("tool_name"):
            calls.append((str(part["tool_name"]), _json_args(part.get("args"))))
    # Anthropic: {"content": [{"type": "text", "text"}, {"type": "tool_use", "name", "input"}]}; or content text
    content = result.get("content")
    if isinstance(content, str):
        texts.append(content)
    for block in content if isinstance(content, list) else []:
        if (
            isinstance(block, dict)
            and block.get("type") in ("text", "output_text")
            and isinstance(block.get("text"), str)
        ):
            texts.append(block["text"])
        elif isinstance(block, dict) and block.get("type") == "tool_use" and block.get("name"):
            calls.append((str(block["name"]), block.get("input")))
    # OpenAI chat completions: {"choices": [{"message": {"content", "tool_calls": [{"function": {...}}]}}]}
    for choice in result.get("choices") or []:
        message = choice.get("message") if isinstance(choice, dict) else None
        if isinstance(message, dict):
            sub = model_reply({"content": message.get("content")})
            texts.extend([sub.text] if sub.text else [])
            for call in message.get("tool_calls") or []:
                fn = call.get("function") if isinstance(call, dict) else None
                if isinstance(fn, dict) and fn.get("name"):
                    calls.append((str(fn["name"]), _json_args(fn.get("arguments"))))
    # OpenAI responses: {"output": [{"type": "message", "content": [...]}, {"type": "function_call", ...}]}
    for item in result.get("output") if isinstance(result.get("output"), list) else []:
        if isinstance(item, dict) and item.get("type") == "message":
            sub = model_reply({"content": item.get("content")})
            texts.extend([sub.text] if sub.text else [])
        elif isinstance(item, dict) and item.get("type") == "function_call" and item.get("name"):
            calls.append((str(item["name"]), _json_args(item.get("arguments"))))
    # The SDK's plain shape: {"text": ..., "call": {"name", "args"} | "calls": [...]}
    text = result.get("text")
    if isinstance(text, str):
        texts.append(text)
    for call in (
        [result.get("call"), *(result.get("calls") or [])] if isinstance(result.get("calls") or [], list) else []
    ):
        if isinstance(call, dict) and (call.get("name") or call.get("tool")):
            calls.append((str(call.get("name") or call.get("tool")), call.get("args")))
    return Reply("\n\n".join(t for t in texts if t.strip()), tuple(calls))


def tokens_of(step, original=None) -> tuple[int, int] | None:
    """(input, output) tokens a step reported when it ran (a carried step: what its original reported)."""
    source = original if original is not None else step
    detail = getattr(source, "usage_detail", None)
    if isinstance(detail, dict) and isinstance(detail.get("input_tokens"), int):
        return detail["input_tokens"], detail.get("output_tokens") or 0
    return None


def _token_count(step, original=None) -> int:
    """A step's tokens: its reported input and output tokens; a model turn that reported a number: that number."""
    tokens = tokens_of(step, original)
    if tokens is not None:
        return tokens[0] + tokens[1]
    source = original if original is not None else step
    return source.usage if step.tool == MODEL else 0


def tokens_text(n: int) -> str:
    return f"{n:,} token{'s' if n != 1 else ''}"


# --- what recovery saved and cost -----------------------------------------------------------------------------


@dataclass
class Tally:
    """Counted from a run's steps: what it carried (reused, not called again) and what it called again.

    `spent` is what its own finished steps cost (tokens where reported, else units): what the budget counted.
    """

    runs: int = 1
    reused_turns: int = 0
    reused_turn_tokens: int = 0
    reused_calls: int = 0
    reused_call_tokens: int = 0
    again_turns: int = 0
    again_turn_tokens: int = 0
    again_calls: int = 0
    again_call_tokens: int = 0
    spent: int = 0
    again_seqs: list = field(default_factory=list)

    def __add__(self, other: "Tally") -> "Tally":
        return Tally(
            runs=self.runs + other.runs,
            reused_turns=self.reused_turns + other.reused_turns,
            reused_turn_tokens=self.reused_turn_tokens + other.reused_turn_tokens,
            reused_calls=self.reused_calls + other.reused_calls,
            reused_call_tokens=self.reused_call_tokens + other.reused_call_tokens,
            again_turns=self.again_turns + other.again_turns,
            again_turn_tokens=self.again_turn_tokens + other.again_turn_tokens,
            again_calls=self.again_calls + other.again_calls,
            again_call_tokens=self.again_call_tokens + other.again_call_tokens,
            spent=self.spent + other.spent,
            again_seqs=[*self.again_seqs, *other.again_seqs],
        )


def steps_by_pk(task_runs: dict) -> dict:
    return {s.pk: s for r in task_runs.values() for s in r.step_list}


def _chain_of(run, task_runs: dict) -> list:
    """The runs of `run`'s chain, oldest first (from the loaded runs: no query)."""
    out = [run]
    while out[-1].continues_id is not None and out[-1].continues_id in task_runs and len(out) < 64:
        out.append(task_runs[out[-1].continues_id])
    return list(reversed(out))


def run_tally(run, task_runs: dict, by_pk: dict | None = None) -> Tally:
    """What `run` reused and called again (top-level steps; a notice is neither: a person or the agent decided)."""
    by_pk = steps_by_pk(task_runs) if by_pk is None else by_pk
    earlier = {
        (s.parent_seq, s.seq)
        for r in _chain_of(run, task_runs)[:-1]
        for s in r.step_list
        if s.reused_from_id is None and s.dispatched_at is not None
    }
    told = {(n.get("parent_seq"), n.get("seq")) for n in (run.carry or {}).get("notices", []) if isinstance(n, dict)}
    t = Tally()
    for s in run.step_list:
        if s.reused_from_id is not None:
            if s.parent_seq is not None or (s.parent_seq, s.seq) in told:
                continue
            tokens = _token_count(s, by_pk.get(s.reused_from_id))
            if s.tool == MODEL:
                t.reused_turns += 1
                t.reused_turn_tokens += tokens
            else:
                t.reused_calls += 1
                t.reused_call_tokens += tokens
            continue
        if s.phase in ("completed", "failed"):
            t.spent += s.usage
        if s.parent_seq is None and (s.parent_seq, s.seq) in earlier and s.dispatched_at is not None:
            tokens = _token_count(s)
            t.again_seqs.append(s.seq)
            if s.tool == MODEL:
                t.again_turns += 1
                t.again_turn_tokens += tokens
            else:
                t.again_calls += 1
                t.again_call_tokens += tokens
    return t


def chain_tally(run, task_runs: dict) -> Tally:
    """The sums of `run_tally` over every run of `run`'s chain."""
    by_pk = steps_by_pk(task_runs)
    chain = _chain_of(run, task_runs)
    total = run_tally(chain[0], task_runs, by_pk)
    for r in chain[1:]:
        total = total + run_tally(r, task_runs, by_pk)
    return total


def _n(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def _with_tokens(text: str, tokens: int) -> str:
    return f"{text} ({tokens_text(tokens)})" if tokens else text


def _saved_and_cost(t: Tally) -> str:
    reused = " and ".join(
        p
        for p in (
            _with_tokens(_n(t.reused_turns, "model turn", "model turns"), t.reused_turn_tokens)
            if t.reused_turns
            else "",
            _with_tokens(_n(t.reused_calls, "tool call", "tool calls"), t.reused_call_tokens) if t.reused_calls else "",
        )
        if p
    )
    again = " and ".join(
        p
        for p in (
            _with_tokens(_n(t.again_turns, "model turn", "model turns"), t.again_turn_tokens) if t.again_turns else "",
            _with_tokens(_n(t.again_calls, "tool call", "tool calls"), t.again_call_tokens) if t.again_calls else "",
        )
        if p
    )
    parts = [f"reused {reused}, not called again" if reused else "reused nothing"]
    parts.append(f"called {again} again, cut off or undecided in an earlier run" if again else "called nothing again")
    return "; ".join(parts)


def run_recovery_line(t: Tally, *, continuation: bool) -> Line | None:
    """What recovery saved and cost in one run (None for a first run: nothing was there to reuse)."""
    if not continuation:
        return None
    return (f"Recovery in this run: {_saved_and_cost(t)}. This run spent {t.spent:,} (counted in the budget).",)


def chain_recovery_line(t: Tally) -> Line | None:
    """The chain's totals on the task page (None while the chain is one run)."""
    if t.runs < 2:
        return None
    return (
        f"Recovery across the {t.runs} runs of this chain: {_saved_and_cost(t)}. Spent {t.spent:,} in all "
        "(tokens where the steps report tokens, else units), every token spent again included — what the budget "
        "counts.",
    )


# --- the conversation -----------------------------------------------------------------------------------------


@dataclass
class Call:
    step: object
    number: str
    tool: str
    args: list[Item]
    args_more: int
    label: str
    note: Line | None
    result: list[Item] = field(default_factory=list)
    result_more: int = 0
    error: Text | None = None
    told: str = ""  # the notice the model received instead of a result
    took: str = ""
    tokens: str = ""


@dataclass
class Turn:
    step: object
    number: str
    model: str
    text: Text | None
    label: str
    note: Line | None
    tokens: str
    asked: list[str] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)


@dataclass
class FollowUp:
    author: str
    written: datetime
    read_at: datetime | None
    body: Text
    state: Line | None
    heading: Line = ()


@dataclass
class Entry:
    kind: str  # "turn" | "call" | "followup"
    turn: Turn | None = None
    call: Call | None = None
    followup: FollowUp | None = None


@dataclass
class Conversation:
    prompt: Text | None
    entries: list[Entry]
    unread: list[FollowUp]
    output: list[Item] | None
    output_text: Text | None
    output_more: int
    turns: int
    calls: int


def _number(step) -> str:
    if step.parent_seq is None:
        return str(step.seq)
    return f"{step.parent_seq}.{step.seq - step.parent_seq * NESTED_BASE}"


CALL_LABELS = {"completed": "ran", "running": "running", "planned": "planned, not started"}
TURN_LABELS = {"completed": "answered", "running": "calling the model", "cut off": "cut off mid-call"}


def _handed_over(step, continued_in) -> Line | None:
    """A cut-off call handed to the agent in the continuation: by whom (None when it was not)."""
    if continued_in is None:
        return None
    for n in (continued_in.carry or {}).get("notices", []):
        if isinstance(n, dict) and n.get("seq") == step.seq and n.get("parent_seq") == step.parent_seq:
            queued = "" if continued_in.started_at else " (queued)"
            if n.get("decision") == "agent_verifies":
                who = n.get("decided_by") or f"its setting ({SETTING_WORDS})"
                return (f"run #{continued_in.pk}{queued} hands it to the agent to verify — decided by {who}",
                        *((": ", Said(n["note"])) if n.get("note") else ()))  # fmt: skip
            if n.get("decision") == "performed":
                return (f"run #{continued_in.pk}{queued} does not run it again: decided it happened — "
                        f"{n.get('decided_by') or 'someone'}", *((": ", Said(n["note"])) if n.get("note") else ()),
                        "; the agent is told so")  # fmt: skip
            if n.get("decision") == "dropped":
                return (f"run #{continued_in.pk}{queued} tells the agent it was dropped (forget mode)",)
    return None


def _row(step, *, run, verdicts, disposition, notices, continued_in, by_pk):
    """The presenter's label and note for a step, in the conversation's words."""
    notice = notices.get((step.parent_seq, step.seq)) if step.reused_from_id else None
    if notice is not None:
        return notice_row(notice), notice
    original = by_pk.get(step.reused_from_id) if step.reused_from_id else None
    row = step_row(
        step,
        run=run,
        verdict=verdicts.get((step.parent_seq, step.seq)),
        disposition=disposition,
        reused_run_id=original.run_id if original is not None else None,
        continued_in=continued_in,
    )
    if row.label == "reused" and original is not None:
        row = StepRow(f"reused from run #{original.run_id}", ("not called again",))
    elif row.label == "unknown outcome":
        handed = _handed_over(step, continued_in)
        if handed is not None:
            row = StepRow("unknown outcome", handed)
    return row, None


def conversation(
    run,
    task_runs: dict,
    *,
    verdicts: dict | None = None,
    disposition: str | None = None,
    continued_in=None,
    messages=(),
) -> Conversation:
    """`run` as its conversation: the prompt, each model turn with the calls it asked for (each with its
    verdict), the notices the model received, the follow-ups where the agent read them, the output."""
    by_pk = steps_by_pk(task_runs)
    verdicts = verdicts or {}
    notices = {
        (n.get("parent_seq"), n.get("seq")): n for n in (run.carry or {}).get("notices", []) if isinstance(n, dict)
    }
    read = sorted((m for m in messages if m.read_at is not None), key=lambda m: (m.read_at, m.pk))
    unread = [m for m in messages if m.read_at is None]
    entries: list[Entry] = []
    current: Turn | None = None
    turns = calls = 0

    def followup(m) -> FollowUp:
        author = m.author.username if getattr(m, "author", None) else "someone"
        _, line = followup_line(m, wait_text="", closed=True)  # not_delivered: only why
        return FollowUp(
            author, m.created_at, m.read_at, text_of(m.body), line, followup_heading_of(author, m.created_at)
        )

    # Nested calls (numbered parent_seq * NESTED_BASE + i) right after their parent, not after later turns.
    ordered = sorted(run.step_list, key=lambda s: (s.seq if s.parent_seq is None else s.parent_seq, s.seq))
    for step in ordered:
        # The follow-ups the agent read before this step was planned join the conversation here.
        while read and step.reused_from_id is None and read[0].read_at <= step.planned_at:
            entries.append(Entry("followup", followup=followup(read.pop(0))))
            current = None
        row, notice = _row(step, run=run, verdicts=verdicts, disposition=disposition, notices=notices,
                           continued_in=continued_in, by_pk=by_pk)  # fmt: skip
        original = by_pk.get(step.reused_from_id) if step.reused_from_id else None
        tokens = tokens_of(step, original)
        token_text = f"{tokens[0]:,} in · {tokens[1]:,} out" if tokens else ""
        if step.tool == MODEL and step.parent_seq is None:
            turns += 1
            args = step.args if isinstance(step.args, dict) else {}
            result = step.result if step.result is not None else (original.result if original is not None else None)
            reply = model_reply(result) if step.phase == "completed" else Reply("", ())
            if not token_text and step.usage and step.phase == "completed" and not step.reused_from_id:
                token_text = tokens_text(step.usage)
            current = Turn(
                step=step,
                number=_number(step),
                model=str(args.get("model") or "model"),
                text=text_of(reply.text) if reply.text else None,
                label=TURN_LABELS.get(row.label, row.label),
                note=row.note,
                tokens=token_text,
                asked=[call_text(name, a, limit=120) for name, a in reply.calls],
            )
            entries.append(Entry("turn", turn=current))
            continue
        calls += 1
        args, args_more = items_of(step.args)
        call = Call(
            step=step,
            number=_number(step),
            tool=step.tool,
            args=args,
            args_more=args_more,
            label=CALL_LABELS.get(row.label, row.label),
            note=row.note,
            took="" if row.declared else duration(step.dispatched_at, step.completed_at),
            tokens=token_text,
        )
        if notice is not None:
            call.told = notice_text(notice)  # the note quotes it too: "…; the model was told: …"
        elif step.result is not None and not row.declared:
            call.result, call.result_more = items_of(step.result)
        if step.error:
            call.error = text_of(step.error)
        if current is not None and step.parent_seq is None:
            current.calls.append(call)
        elif current is not None and current.calls:
            current.calls.append(call)
        else:
            entries.append(Entry("call", call=call))
    for m in read:
        entries.append(Entry("followup", followup=followup(m)))
    prompt = (run.input or {}).get("prompt") if isinstance(run.input, dict) else None
    output_items, output_text, output_more = None, None, 0
    if run.output is not None:
        if isinstance(run.output, str):
            output_text = text_of(run.output)
        else:
            output_items, output_more = items_of(run.output)
    return Conversation(
        prompt=text_of(prompt) if isinstance(prompt, str) else None,
        entries=entries,
        unread=[followup(m) for m in unread],
        output=output_items,
        output_text=output_text,
        output_more=output_more,
        turns=turns,
        calls=calls,
    )


def reason_for_call(steps: list, seq: int) -> str:
    """The model's reason for the call at `seq`: the text of the last model turn before it that said something."""
    for step in sorted((s for s in steps if s.parent_seq is None and s.seq < seq), key=lambda s: -s.seq):
        if step.tool == MODEL and step.phase == "completed":
            text = model_reply(step.result).text.strip()
            if text:
                return text
    return ""


def conversation_heading(run) -> Line:
    return (f"The conversation of run #{run.pk}",)


def followup_heading_of(author: str, written: datetime) -> Line:
    return (f"Follow-up from {author}, written ", At(written))
