"""Output serializers of the operator API: what /api/schema/ says `recovery.api.shapes` returns (API.md).

They describe; recovery.api.shapes builds. schemathesis checks every response against them
(tests/tasks/test_schema_conformance.py), so a field added to a presenter is added here too.
"""

from rest_framework import serializers

from tasks.schemas import MessageOut

Nullable = {"allow_null": True}


class GateOut(serializers.Serializer):
    gate = serializers.CharField()
    detail = serializers.CharField(allow_blank=True)
    lifted_by = serializers.CharField(required=False)


class AttemptOut(serializers.Serializer):
    number = serializers.IntegerField()
    requested_by = serializers.CharField()
    requested_at = serializers.DateTimeField(**Nullable)
    acknowledged_at = serializers.DateTimeField(**Nullable)
    continuation_run = serializers.IntegerField(**Nullable)
    outcome = serializers.CharField(allow_blank=True)
    accepted_duplicate_risk = serializers.BooleanField()
    decision = serializers.CharField(**Nullable)
    note = serializers.CharField(allow_blank=True)
    rejected_gate = serializers.CharField(**Nullable)
    rejected_detail = serializers.CharField(**Nullable)


class RepairOut(serializers.Serializer):
    id = serializers.IntegerField()
    repair = serializers.CharField()
    requested_by = serializers.CharField(**Nullable)
    status = serializers.CharField()
    result = serializers.JSONField(**Nullable)
    # A repair job (the workspace is on a worker): the label of the workers that may do it, who took it, when.
    label = serializers.CharField(**Nullable)
    claimed_by = serializers.CharField(**Nullable)
    claimed_at = serializers.DateTimeField(**Nullable)
    created_at = serializers.DateTimeField()
    completed_at = serializers.DateTimeField(**Nullable)
    summary = serializers.CharField()


class ActionOut(serializers.Serializer):
    id = serializers.IntegerField()
    task = serializers.IntegerField()
    run = serializers.IntegerField()
    kind = serializers.CharField()
    status = serializers.CharField()
    cause = serializers.CharField(allow_blank=True)
    evidence = serializers.JSONField()
    seq = serializers.IntegerField(**Nullable)
    original_owner = serializers.CharField()
    recovery_owner = serializers.CharField(**Nullable)
    repair_task = serializers.IntegerField(**Nullable)
    return_owner = serializers.CharField(**Nullable)
    attempts = serializers.IntegerField()
    max_attempts = serializers.IntegerField()
    due_at = serializers.DateTimeField(**Nullable)
    next_action = serializers.CharField(allow_blank=True)
    label = serializers.CharField(allow_blank=True)
    summary = serializers.ListField(child=serializers.CharField(allow_blank=True))
    decision = serializers.CharField(**Nullable)
    decided_by = serializers.CharField(**Nullable)
    decided_at = serializers.DateTimeField(**Nullable)
    decision_note = serializers.CharField(**Nullable)
    exhaustion = serializers.CharField(**Nullable)
    gate = GateOut(**Nullable)
    version = serializers.IntegerField()
    resolution = serializers.CharField(**Nullable)
    resolution_note = serializers.CharField(**Nullable)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    attempt_history = AttemptOut(many=True)
    repairs = RepairOut(many=True)
    repair_task_status = serializers.CharField(**Nullable)


class TaskOut(serializers.Serializer):
    id = serializers.IntegerField()
    title = serializers.CharField()
    agent = serializers.CharField()
    status = serializers.CharField()
    state = serializers.CharField()
    paused = serializers.BooleanField()
    budget_limit = serializers.IntegerField(**Nullable)
    budget_used = serializers.IntegerField()
    private = serializers.BooleanField()
    parent = serializers.IntegerField(**Nullable)
    current_run = serializers.IntegerField(**Nullable)
    current_run_status = serializers.CharField(**Nullable)
    actions = ActionOut(many=True)
    closed_by = serializers.CharField(**Nullable)
    closed_at = serializers.DateTimeField(**Nullable)
    close_reason = serializers.CharField(**Nullable)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class TaskDetailOut(TaskOut):
    runs = serializers.ListField(child=serializers.IntegerField())
    messages = MessageOut(many=True)
    workspace = serializers.CharField(allow_blank=True)
    export_destination = serializers.CharField(allow_blank=True)
    creator = serializers.CharField(**Nullable)
    dependencies = serializers.ListField(child=serializers.IntegerField())
    kind = serializers.ChoiceField(choices=("plan", "agent"), help_text="of its input: a plan or an agent prompt")
    output = serializers.JSONField(**Nullable, help_text="what the agent returned in the task's latest run")


class TaskPageOut(serializers.Serializer):
    results = TaskOut(many=True)
    next = serializers.URLField(**Nullable)


class StepOut(serializers.Serializer):
    seq = serializers.IntegerField()
    parent_seq = serializers.IntegerField(**Nullable)
    tool = serializers.CharField()
    args = serializers.JSONField(help_text="in the payload wire form")
    phase = serializers.CharField()
    recovery_mode = serializers.CharField()
    result = serializers.JSONField(**Nullable, help_text="in the payload wire form")
    error = serializers.CharField(**Nullable)
    reused = serializers.BooleanField()
    usage = serializers.IntegerField(help_text="units, or a model turn's tokens in and out")
    usage_detail = serializers.JSONField(**Nullable, help_text="a model turn's input_tokens, output_tokens, cost?")
    planned_at = serializers.DateTimeField(**Nullable)
    dispatched_at = serializers.DateTimeField(**Nullable)
    completed_at = serializers.DateTimeField(**Nullable)
    carried = serializers.CharField(**Nullable, help_text="saved_result | declared_performed | notice")
    declared = serializers.JSONField(required=False)
    notice = serializers.JSONField(required=False, help_text="the notice the agent got instead of a result")


class RunUsageOut(serializers.Serializer):
    spent = serializers.IntegerField(help_text="what this run's own finished steps used")
    reused = serializers.IntegerField(help_text="what the steps it carried had cost (not spent again)")
    spent_again = serializers.IntegerField(help_text="of `spent`, steps an earlier run of the chain had dispatched")


class RunOut(serializers.Serializer):
    id = serializers.IntegerField()
    task = serializers.IntegerField()
    agent = serializers.CharField()
    status = serializers.CharField()
    attempt = serializers.IntegerField()
    continues = serializers.IntegerField(**Nullable)
    continued_by = serializers.IntegerField(**Nullable)
    error_code = serializers.CharField(**Nullable)
    error_detail = serializers.CharField(**Nullable)
    stop_reason = serializers.CharField(**Nullable)
    stop_receipt = serializers.JSONField(**Nullable)
    recovery_disabled = serializers.CharField(**Nullable)
    lease_owner = serializers.CharField(**Nullable)
    lease_epoch = serializers.IntegerField()
    lease_expires_at = serializers.DateTimeField(**Nullable)
    last_heartbeat_at = serializers.DateTimeField(**Nullable)
    checkpoint_purged_at = serializers.DateTimeField(**Nullable)
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(**Nullable)
    finished_at = serializers.DateTimeField(**Nullable)
    stop_requested_by = serializers.CharField(**Nullable)
    stop_requested_at = serializers.DateTimeField(**Nullable)
    input = serializers.JSONField()
    kind = serializers.ChoiceField(choices=("plan", "agent"))
    output = serializers.JSONField(**Nullable, help_text="what the agent returned, in the payload wire form")
    diverged = serializers.JSONField(**Nullable, help_text="the step and its saved and asked calls")
    usage = RunUsageOut()
    notices = serializers.ListField(child=serializers.JSONField(), help_text="what the run's agent was told")
    steps = StepOut(many=True)
    diagnosis = serializers.JSONField(help_text="disposition, steps, reasons (API.md)")


class RetryOut(AttemptOut):
    action = ActionOut()


class QueuedRunOut(serializers.Serializer):
    run = serializers.IntegerField()
    task = serializers.IntegerField()
    status = serializers.CharField(required=False)
    continues = serializers.IntegerField(required=False, **Nullable)
    fresh_start = serializers.BooleanField(required=False)
    continued_from = serializers.JSONField(
        required=False, help_text="Continue from step k: the run reused from, `seq`, `reused`, `runs_again`"
    )


class RunsAgainOut(serializers.Serializer):
    seq = serializers.IntegerField()
    tool = serializers.CharField()
    args = serializers.JSONField()
    recovery_mode = serializers.CharField()
    side_effect = serializers.BooleanField(help_text="its recovery mode is notify: running it again may act outside")


class ContinueFromPreviewOut(serializers.Serializer):
    reused = serializers.ListField(child=serializers.IntegerField(), help_text="steps whose saved results are reused")
    runs_again = RunsAgainOut(many=True)
    needs_consent = serializers.BooleanField(help_text="a step that runs again may act outside")


class RepairResultOut(RepairOut):
    action = ActionOut()


class WorkspaceOut(serializers.Serializer):
    path = serializers.CharField(allow_blank=True)
    held = serializers.BooleanField()
    files = serializers.ListField(child=serializers.JSONField())
    exists = serializers.BooleanField(required=False)
    hold = serializers.JSONField(required=False, **Nullable)
    held_copies = serializers.ListField(child=serializers.JSONField(), required=False)
    export = serializers.JSONField(required=False, **Nullable)
    reason = serializers.CharField(required=False)
    kept = serializers.JSONField(required=False)


class DeliveredOut(serializers.Serializer):
    task = serializers.IntegerField()
    messages = serializers.ListField(child=serializers.IntegerField(), help_text="the follow-ups waiting again")
