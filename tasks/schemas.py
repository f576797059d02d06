"""What /api/schema/ says the API answers: output serializers of the runner API, the one error shape, and the
AutoSchema that documents every error status an operation can answer (schemathesis checks both against the
real responses: tests/tasks/test_schema_conformance.py).

These serializers describe responses; the views build the same dicts (tasks/api.py, recovery/api_shapes.py).
"""

from drf_spectacular.openapi import AutoSchema
from rest_framework import serializers

from tasks.models import RecoveryMode

# Every operation may answer these with the error shape (API.md, Conventions).
ERROR_STATUSES = {
    "400": "invalid: the request is malformed or out of range",
    "401": "not_authenticated",
    "403": "forbidden: the role (or a worker/person token) does not allow it",
    "404": "not_found: no such object, or one the caller may not see",
    "405": "method_not_allowed",
    "409": "stale_lease | stale_version | gate_closed | not_eligible | idempotency_conflict | ...",
    "413": "payload_too_large",
    "415": "unsupported media type",
    "429": "throttled",
}


class ErrorOut(serializers.Serializer):
    code = serializers.CharField(help_text="a stable code: invalid, not_found, stale_lease, gate_closed, …")
    detail = serializers.CharField(help_text="a sentence for people")
    field = serializers.CharField(required=False)
    gate = serializers.CharField(required=False)
    reason = serializers.CharField(required=False)
    errors = serializers.JSONField(required=False, help_text="per field, for `invalid` bodies")


class ConsoleAutoSchema(AutoSchema):
    """DRF-spectacular's schema, with the error responses every operation can give (no undocumented status)."""

    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        for code, description in ERROR_STATUSES.items():
            if code not in responses:
                responses[code] = self._get_response_for_code(ErrorOut, code, direction=direction)
                responses[code]["description"] = description
        return responses


# --- the runner API -------------------------------------------------------------------------------------


class MessageOut(serializers.Serializer):
    id = serializers.IntegerField()
    body = serializers.CharField()
    author = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()
    status = serializers.CharField(help_text="waiting | admitted | delivered | read | not_delivered")
    waiting_reason = serializers.CharField(allow_blank=True)
    run = serializers.IntegerField(allow_null=True)
    read_at = serializers.DateTimeField(allow_null=True, help_text="when the run it was handed to acknowledged it")


class ClaimedMessageOut(serializers.Serializer):
    id = serializers.IntegerField()
    author = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()
    body = serializers.CharField()


class MessagesAckOut(serializers.Serializer):
    acknowledged = serializers.ListField(child=serializers.IntegerField())


class ReusedOut(serializers.Serializer):
    seq = serializers.IntegerField()
    parent_seq = serializers.IntegerField(allow_null=True)
    tool = serializers.CharField()
    args = serializers.JSONField(help_text="the saved arguments, in the payload wire form")
    result = serializers.JSONField(allow_null=True, help_text="the saved result, in the payload wire form")
    ok = serializers.BooleanField()
    error = serializers.CharField(allow_null=True)
    usage = serializers.IntegerField(help_text="what the saved step cost when it ran (units or tokens)")
    usage_detail = serializers.JSONField(allow_null=True, help_text="a model turn's token counts, if reported")


class NoticeOut(serializers.Serializer):
    seq = serializers.IntegerField()
    parent_seq = serializers.IntegerField(allow_null=True)
    tool = serializers.CharField()
    args = serializers.JSONField()
    decision = serializers.ChoiceField(choices=("performed", "agent_verifies", "dropped"))
    decided_by = serializers.CharField(allow_null=True, help_text="null where the agent's setting handed it over")
    decided_at = serializers.DateTimeField(allow_null=True)
    note = serializers.CharField(allow_blank=True)
    text = serializers.CharField(required=False, help_text="the sentence the agent's model is given instead")


class ClaimOut(serializers.Serializer):
    run = serializers.IntegerField()
    task = serializers.IntegerField()
    agent = serializers.CharField()
    kind = serializers.ChoiceField(choices=("plan", "agent"))
    attempt = serializers.IntegerField()
    lease_epoch = serializers.IntegerField()
    lease_expires_at = serializers.DateTimeField()
    lease_seconds = serializers.IntegerField(help_text="how long a lease lasts without a heartbeat")
    heartbeat_seconds = serializers.IntegerField(help_text="how often the server expects a heartbeat")
    input = serializers.JSONField(help_text="the plan or the agent prompt, in the payload wire form")
    reused = ReusedOut(many=True)
    notices = NoticeOut(many=True, help_text="steps the agent gets a notice for instead of a saved result")
    next_seq = serializers.IntegerField(help_text="one more than the highest top-level step number the chain planned")
    messages = ClaimedMessageOut(many=True)
    dropped = serializers.ListField(child=serializers.JSONField())
    workspace = serializers.CharField(allow_blank=True)


class HeartbeatOut(serializers.Serializer):
    lease_expires_at = serializers.DateTimeField()
    stop_requested = serializers.BooleanField()


class StepPlannedOut(serializers.Serializer):
    seq = serializers.IntegerField()
    phase = serializers.CharField()
    recovery_mode = serializers.CharField()


class StepBatchPlannedOut(serializers.Serializer):
    steps = StepPlannedOut(many=True)


class StepDispatchedOut(serializers.Serializer):
    seq = serializers.IntegerField()
    phase = serializers.CharField()


class StepCompletedOut(serializers.Serializer):
    seq = serializers.IntegerField()
    phase = serializers.CharField()
    stop_requested = serializers.BooleanField()


class FinishOut(serializers.Serializer):
    run = serializers.IntegerField()
    id = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=("plan", "agent"))
    status = serializers.CharField()
    error_code = serializers.CharField(allow_blank=True)
    stop_receipt = serializers.JSONField(allow_null=True)
    output = serializers.JSONField(allow_null=True, help_text="what the agent returned, in the payload wire form")
    diverged = serializers.JSONField(allow_null=True, help_text="the step and its saved and asked calls")


class CatalogueToolOut(serializers.Serializer):
    name = serializers.CharField()
    default_mode = serializers.ChoiceField(choices=RecoveryMode.choices, help_text="as registered")
    mode = serializers.ChoiceField(choices=RecoveryMode.choices, help_text="in effect: an override wins")
    description = serializers.CharField(allow_blank=True)


class AgentToolsOut(serializers.Serializer):
    agent = serializers.CharField()
    tools = CatalogueToolOut(many=True)


class ChildTaskOut(serializers.Serializer):
    task = serializers.IntegerField()
    parent = serializers.IntegerField(allow_null=True)


class EventOut(serializers.Serializer):
    id = serializers.IntegerField()
    kind = serializers.CharField()
    task = serializers.IntegerField(allow_null=True)
    run = serializers.IntegerField(allow_null=True)
    actor = serializers.CharField(allow_blank=True)
    payload = serializers.JSONField()
    created_at = serializers.DateTimeField()


class EventPageOut(serializers.Serializer):
    results = EventOut(many=True)
    next = serializers.URLField(allow_null=True)
