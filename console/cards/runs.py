"""A run's card, its run page's parts, its conversation, and the chain of runs on a task page."""

from django.db.models import F, Prefetch
from django.template.loader import render_to_string

from console.cards.continue_from import continue_from_offer
from recovery import conversation
from recovery.models import RecoveryAttempt
from recovery.selectors import diagnose, run_usage, step_modes_now
from recovery.words.agent_runs import (
    notice_row,
    output_heading,
    prompt_line,
    usage_line,
)
from recovery.words.continue_from import continued_later_text
from recovery.words.runs import (
    carried_lines,
    continued_by_text,
    diagnosis_line,
    duration,
    run_lines,
    step_mode,
    step_row,
)
from recovery.words.vocabulary import RUN_STATUSES, reason_items
from recovery.words.workspaces import step_files_note
from tasks.authz import can_operate
from tasks.models import LIVE_RUN_STATUSES, WORKSPACE_VALIDATION_FAILED, Message, Run, Step, Task

FINAL_FOR_DIAGNOSIS = ("interrupted", "stopped")


def run_context(run: Run, task_runs: dict[int, Run], user) -> dict:
    steps = run.step_list
    diagnosis = diagnose(run, steps, task_runs=task_runs) if run.status in FINAL_FOR_DIAGNOSIS else None
    verdicts = {(v.parent_seq, v.seq): v for v in diagnosis.steps} if diagnosis is not None else {}
    disposition = diagnosis.disposition if diagnosis is not None else None
    continuation = next(
        (r for r in task_runs.values() if r.continues_id == run.pk and (r.status in LIVE_RUN_STATUSES or r.started_at)),
        None,
    )
    rows = []
    modes_now = step_modes_now(run, steps)  # a step planned before a settings change keeps its mode
    notices = {
        (n.get("parent_seq"), n.get("seq")): n for n in (run.carry or {}).get("notices", []) if isinstance(n, dict)
    }
    for s in steps:
        notice = notices.get((s.parent_seq, s.seq)) if s.reused_from_id else None
        row = (
            notice_row(notice)
            if notice is not None
            else step_row(
                s,
                run=run,
                verdict=verdicts.get((s.parent_seq, s.seq)),
                disposition=disposition,
                reused_run_id=getattr(s, "reused_run_id", None),
                continued_in=continuation,
            )
        )
        rows.append(
            {
                "step": s,
                "label": row.label,
                "note": row.note,
                "declared": row.declared,
                "took": "" if row.declared else duration(s.dispatched_at, s.completed_at),
                "mode": step_mode(s.recovery_mode, modes_now.get(s.pk)),
                "files": step_files_note(s.workspace_notes),
            }
        )
    refused = next(
        (
            r
            for r in sorted(task_runs.values(), key=lambda r: -r.pk)
            if r.continues_id == run.pk and r.error_code == WORKSPACE_VALIDATION_FAILED and r.started_at is None
        ),
        None,
    )
    profile = getattr(run.agent, "profile", None)
    auto_resume = profile.auto_resume if profile is not None else True
    carried_messages = [m for m in getattr(run, "carried_messages", [])]
    agent = run.kind == "agent"
    return {
        "run": run,
        "agent_run": agent,
        "prompt": prompt_line(run) if agent else None,
        "output_heading": output_heading(run) if run.output is not None else "",
        "usage": usage_line(run_usage(run, steps, task_runs=task_runs)),
        "recovery_cost": conversation.run_recovery_line(
            conversation.run_tally(run, task_runs), continuation=run.continues_id is not None
        )
        if agent
        else None,
        "status_text": RUN_STATUSES.get(run.status, run.status),
        "lines": run_lines(run, auto_resume=auto_resume, disposition=disposition),
        "rows": rows,
        "dropped": sorted(d.get("seq") for d in (run.carry or {}).get("dropped", []) if d.get("seq") is not None),
        "diagnosis": diagnosis,
        "diagnosis_reasons": reason_items(diagnosis.reasons) if diagnosis is not None else [],
        "diagnosis_line": diagnosis_line(
            run, diagnosis, auto_resume=auto_resume, continued_by=continuation, refused_by=refused
        ),
        "continuation": continuation,
        "continued_by_text": continued_by_text(continuation),
        "carried": carried_lines(getattr(run, "carried_decisions", []), carried_messages),
        "can_operate": can_operate(user, run.org_id),
    }


def render_run_card(
    run: Run, task_runs: dict[int, Run], *, user, request=None, oob: bool = False, conversation: bool = False
) -> str:
    """`conversation`: the card heads an agent run's own page, whose conversation shows the prompt, the steps
    and the output (the card then leaves them to it)."""
    ctx = run_card_context(run_context(run, task_runs, user), conversation=conversation)
    ctx["oob"] = oob
    return render_to_string("console/cards/run.html#card", ctx, request=request)


def run_card_context(ctx: dict, *, conversation: bool = False) -> dict:
    """A run card's context from `run_context`; `conversation` as in `render_run_card`."""
    return {**ctx, "in_conversation": conversation and ctx["agent_run"]}


def run_page_context(run: Run, ctx: dict, task_runs: dict[int, Run] | None = None) -> dict:
    """What a run page shows around its card (lineage, diagnosis, Continue from step k on the task's latest run),
    from the card's own context."""
    keys = ("diagnosis", "diagnosis_reasons", "diagnosis_line", "continuation", "continued_by_text")
    latest = task_runs is not None and max(task_runs) == run.pk
    offer = continue_from_offer(run.task, run, operate=ctx["can_operate"]) if latest else None
    # The latest run a person started by Continue from step k of this one (from the task's loaded runs: no query).
    later = max(
        (r for r in (task_runs or {}).values() if ((r.carry or {}).get("continued_from") or {}).get("run") == run.pk),
        key=lambda r: r.pk,
        default=None,
    )
    return {
        "run": run,
        "continue_from": offer,
        "continued_later": later,
        "continued_later_text": continued_later_text(later),
        **{k: ctx[k] for k in keys},
    }


def render_run_page_parts(run: Run, task_runs: dict[int, Run], *, user, request=None, oob: bool = False) -> str:
    """A run page's lineage and diagnosis, as the page draws them: a push redraws them with the card."""
    ctx = {**run_page_context(run, run_context(run, task_runs, user), task_runs), "oob": oob}
    return "".join(
        render_to_string(f"console/run.html#{part}", ctx, request=request)
        for part in ("lineage", "continue_offer", "diagnosis")
    )


def conversation_context(run: Run, task_runs: dict[int, Run]) -> dict:
    """An agent run as its conversation (recovery.conversation), from the task's loaded runs: no query."""
    diagnosis = diagnose(run, run.step_list, task_runs=task_runs) if run.status in FINAL_FOR_DIAGNOSIS else None
    continuation = next(
        (r for r in task_runs.values() if r.continues_id == run.pk and (r.status in LIVE_RUN_STATUSES or r.started_at)),
        None,
    )
    talk = conversation.conversation(
        run,
        task_runs,
        verdicts={(v.parent_seq, v.seq): v for v in diagnosis.steps} if diagnosis is not None else {},
        disposition=diagnosis.disposition if diagnosis is not None else None,
        continued_in=continuation,
        messages=getattr(run, "carried_messages", []),
    )
    return {
        "run": run,
        "talk": talk,
        "heading": conversation.conversation_heading(run),
        "output_heading": output_heading(run) if run.output is not None else "",
    }


def render_conversation(run: Run, task_runs: dict[int, Run], *, request=None, oob: bool = False) -> str:
    """The conversation section of an agent run's page; empty for a scripted run (its page lists its steps)."""
    if run.kind != "agent":
        return ""
    ctx = conversation_context(run, task_runs)
    ctx["oob"] = oob
    return render_to_string("console/cards/conversation.html#conversation", ctx, request=request)


def task_runs_of(task_id: int) -> dict[int, Run]:
    """Every run of the task with its steps, carried messages and decisions, in a fixed number of queries."""

    runs = (
        Run.objects.filter(task_id=task_id)
        .select_related("agent__profile")
        .prefetch_related(
            Prefetch(
                "steps",
                queryset=Step.objects.annotate(reused_run_id=F("reused_from__run_id")).order_by("seq"),
                to_attr="step_list",
            ),
            Prefetch(
                "messages",
                queryset=Message.objects.select_related("author").order_by("created_at", "id"),
                to_attr="carried_messages",
            ),
        )
        .order_by("id")
    )
    by_id = {r.pk: r for r in runs}
    decisions = RecoveryAttempt.objects.filter(continuation_run_id__in=list(by_id)).exclude(decision="")
    for run in by_id.values():
        run.carried_decisions = []
    for attempt in decisions:
        by_id[attempt.continuation_run_id].carried_decisions.append(attempt)
    return by_id


def chain_context(task: Task, task_runs: dict[int, Run], *, user, request=None) -> dict:
    return {
        "task": task,
        "run_cards": [render_run_card(r, task_runs, user=user, request=request) for r in task_runs.values()],
        "chain_recovery": chain_recovery(task_runs),
    }


def render_chain(task: Task, task_runs: dict[int, Run], *, user, request=None, oob: bool = False) -> str:
    ctx = {"oob": oob, **chain_context(task, task_runs, user=user, request=request)}
    return render_to_string("console/cards/sections.html#chain", ctx, request=request)


def chain_recovery(task_runs: dict[int, Run]):
    """An agent's chain: what recovery reused and what it spent again, over all its runs (None for a plan)."""
    latest = task_runs[max(task_runs)] if task_runs else None
    if latest is None or latest.kind != "agent":
        return None
    return conversation.chain_recovery_line(conversation.chain_tally(latest, task_runs))


def render_chain_recovery(task: Task, task_runs: dict[int, Run], *, request=None, oob: bool = False) -> str:
    """The chain's recovery line alone: a push redraws it whenever a run of the chain changed."""
    ctx = {"oob": oob, "task": task, "chain_recovery": chain_recovery(task_runs)}
    return render_to_string("console/cards/sections.html#chain_recovery", ctx, request=request)
