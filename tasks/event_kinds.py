"""Every kind of Event, in one registry: what each records. `event_append` refuses a kind not listed here.

An Event is the record of one change, appended in the change's transaction (tasks/events.py); pages, the live
relay, the timeline and the API read them. A new kind is added here first, with what it records; the live
pages' groups of kinds (console/live/) and the named SQL (tasks/sql/) name only kinds from here.
"""

KINDS: dict[str, str] = {
    # organizations, people, agents, tokens (tasks/accounts.py, tasks/export_roots.py, tasks/catalogue.py)
    "org_created": "an organization was created",
    "member_set": "a person was given a role in an organization",
    "member_removed": "a person's membership was removed",
    "signin_unlocked": "an admin lifted a sign-in lockout",
    "session_ended": "a person signed out or changed their password: their live pages check their session",
    "agent_created": "an agent was created",
    "token_issued": "an API token was issued",
    "token_revoked": "an API token was revoked",
    "export_root_added": "an admin added a root that exports may be written under",
    "export_root_removed": "an admin removed an export root",
    "tools_registered": "an agent registered its tool catalogue",
    "profile_updated": "an agent's recovery settings changed",
    # tasks (tasks/services.py, recovery/actions/controls.py)
    "task_created": "a task was created",
    "task_paused": "a task was paused",
    "task_resumed": "a task's pause was lifted",
    "task_closed": "a task was closed (done or cancelled)",
    "task_reopened": "a closed task was reopened",
    "task_reassigned": "a task was given to another agent",
    "task_budget_set": "a task's budget was changed",
    "task_continued": "a person continued a task (Continue now, Start over)",
    "task_dependencies_changed": "a task's dependencies changed",
    # runs (tasks/services.py, recovery/actions/continuations.py, tasks/sql/claim.sql)
    "run_queued": "a run was queued",
    "run_claimed": "a worker claimed a run and holds its lease",
    "run_continued": "a continuation was queued for an interrupted or stopped run",
    "run_continued_from": "a person continued a task from a chosen step in a new run (Continue from step k): "
    "what it reuses, what runs again, the duplicate risk accepted and why (recovery/actions/continue_from.py)",
    "run_workspace_checked": "the worker holding a continuation's workspace found it as the manifest says: the "
    "continuation starts (recovery/workspaces/reports.py)",
    "run_refused": "a continuation was refused before it started (the workspace no longer matched)",
    "run_stop_requested": "a person asked a run to stop",
    "run_stopped": "a run stopped (the stop is verified)",
    "run_finished": "a run ended (succeeded or failed)",
    "run_interrupted": "a run's lease lapsed: its worker is gone",
    "run_cancelled": "a queued run was cancelled before any worker started it",
    "run_recovery_disabled": "a run can no longer be recovered (a result too large to checkpoint)",
    "checkpoint_purged": "a finished run's checkpoint was purged by retention",
    # steps (tasks/services.py, tasks/sql/checkpoints.sql)
    "step_planned": "a step was planned",
    "step_dispatched": "a step was dispatched: the worker is about to call it",
    "step_completed": "a step completed with its result",
    "step_failed": "a step failed with its error",
    # follow-up messages (recovery/actions/followups.py, recovery/actions/continuations.py, tasks/services.py)
    "message_saved": "a follow-up was written",
    "message_waiting": "a follow-up waits for the run it will be delivered to",
    "messages_admitted": "follow-ups were admitted to a continuation",
    "messages_read": "a run acknowledged follow-ups it read",
    "messages_returned": "follow-ups a run did not read wait again for the next run",
    "messages_requeued": "an operator asked for follow-ups to be delivered again",
    "messages_not_delivered": "follow-ups were marked not delivered (their task closed)",
    # recovery actions (recovery/action_log.py, recovery/actions/commands.py and settle.py,
    # recovery/workspaces/repairs.py and repair_jobs.py)
    "action_opened": "a recovery action was opened",
    "action_decided": "a person decided an unknown outcome",
    "action_retry_requested": "a person asked for another attempt",
    "action_admission_refused": "an attempt was refused at admission; the action is open again",
    "action_resolved": "a recovery action was resolved",
    "action_exhausted": "a recovery action used up its attempts",
    "action_cancelled": "a recovery action was cancelled",
    "action_retired": "a recovery action was retired (its cause no longer holds)",
    "action_repaired": "an admin ran a workspace repair",
    "action_repair_queued": "an admin asked for a workspace repair a worker holding the workspace does (a repair "
    "job; the server never opens that disk)",
    "action_repair_claimed": "a worker holding the workspace took a repair job (or took over one whose worker went "
    "silent)",
    "action_repair_task_opened": "an admin opened a repair task for a workspace action",
    "action_returned": "a workspace action returned to its owner when its repair task was done",
    # decision deadlines (recovery/notify.py)
    "decision_overdue": "a decision has waited past its organization's deadline (it is still waiting)",
    # notification destinations (recovery/notify.py)
    "notify_destination_added": "an admin added a notification destination",
    "notify_destination_enabled": "an admin turned a failing notification destination on again",
    "notify_destination_removed": "an admin removed a notification destination",
    # workspaces (recovery/workspaces/exports.py)
    "workspace_exported": "a run's workspace was copied to its export destination",
    "workspace_export_failed": "copying a run's workspace to its export destination failed",
    # bulk operations (recovery/bulk/operations.py)
    "bulk_previewed": "a bulk operation's scope was frozen for preview",
    "bulk_started": "a bulk operation started",
    "bulk_progress": "a bulk operation's progress",
    "bulk_item": "a bulk operation acted on one task",
    "bulk_finished": "a bulk operation finished",
    "bulk_cancelled": "a bulk operation was cancelled",
    # recovery breakers (recovery/actions/breakers.py): organization-wide, no task
    "breaker_opened": "a recovery breaker opened (or opened again after its trial continuation failed)",
    "breaker_half_open": "a recovery breaker's cool-off passed: one trial continuation may run",
    "breaker_closed": "a recovery breaker closed (an admin, with a reason, or its trial continuation succeeded)",
    # recovery limits (recovery/limits.py): organization-wide, no task
    "org_recovery_settings_changed": "an admin changed the organization's breaker limits or decision deadline",
}


def registered(kind: str) -> str:
    """`kind` itself, if it is registered; else a ValueError (a programming error: register it first)."""
    if kind not in KINDS:
        raise ValueError(f"event kind {kind!r} is not registered in tasks/event_kinds.py")
    return kind
