"""The recovery breakers' API (API.md "Power tools"): the list, and an admin's close."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from recovery import selectors
from recovery.actions import breakers
from recovery.rules.breaker import breaker_sentence
from tasks.api import BaseAPIView, idempotent, iso
from tasks.auth import IsPerson
from tasks.errors import Invalid


class BreakerOut(serializers.Serializer):
    id = serializers.IntegerField()
    agent = serializers.CharField()
    tool = serializers.CharField(allow_null=True, help_text="the tool of the failure, when it names one")
    signature = serializers.CharField(help_text='"<tool> / <code>" (recovery/rules/breaker.py)')
    tasks = serializers.IntegerField(help_text="distinct tasks of the agent that failed so since it tripped")
    opened_at = serializers.DateTimeField()
    state = serializers.ChoiceField(choices=["open", "half_open", "closed"])
    closed_by = serializers.CharField(allow_blank=True)
    reason = serializers.CharField(allow_blank=True)
    first_at = serializers.DateTimeField()
    last_at = serializers.DateTimeField()
    half_open_at = serializers.DateTimeField(allow_null=True)
    closed_at = serializers.DateTimeField(allow_null=True)
    trial_run = serializers.IntegerField(allow_null=True)
    sentence = serializers.CharField()


class BreakerListOut(serializers.Serializer):
    results = BreakerOut(many=True)
    next = serializers.CharField(allow_null=True)


def breaker_data(b) -> dict:
    return {
        "id": b.pk,
        "agent": b.agent.name,
        "tool": b.tool or None,
        "signature": b.signature,
        "tasks": b.tasks,
        "opened_at": iso(b.opened_at),
        "state": b.state,
        "closed_by": b.closed_by,
        "reason": b.reason,
        "first_at": iso(b.first_at),
        "last_at": iso(b.last_at),
        "half_open_at": iso(b.half_open_at),
        "closed_at": iso(b.closed_at),
        "trial_run": b.probe_run_id,
        "sentence": breaker_sentence(
            agent=b.agent.name,
            signature=b.signature,
            tasks=b.tasks,
            span_seconds=(b.last_at - b.first_at).total_seconds(),
            state=b.state,
        ),
    }


class BreakerListView(BaseAPIView):
    """Open and recent breakers of the caller's organizations (any member)."""

    permission_classes = [IsPerson]

    @extend_schema(responses=BreakerListOut)
    def get(self, request):
        return Response({"results": [breaker_data(b) for b in selectors.breakers_recent(request.user)], "next": None})


class BreakerCloseView(BaseAPIView):
    """An admin closes a breaker with a reason; the runs it held continue at the next supervisor pass."""

    permission_classes = [IsPerson]

    class BreakerCloseInputSerializer(serializers.Serializer):
        reason = serializers.CharField(max_length=breakers.REASON_MAX, allow_blank=True, required=False)

    @extend_schema(request=BreakerCloseInputSerializer, responses=BreakerOut)
    def post(self, request, breaker_id: int):
        selectors.breaker_visible(request.user, breaker_id)  # 404 before anything about the body
        data = self.BreakerCloseInputSerializer(data=request.data if isinstance(request.data, dict) else {})
        if not data.is_valid():
            raise Invalid("`reason` must be a string of at most 500 characters.", field="reason")

        def handle():
            b = breakers.breaker_close(
                user=request.user, breaker_id=breaker_id, reason=data.validated_data.get("reason", "")
            )
            return Response(breaker_data(b))

        return idempotent(request, handle)
