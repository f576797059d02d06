"""The bulk API (API.md `/api/bulk/`): preview a frozen scope, execute it, follow its items, cancel it."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response

from recovery.bulk import operations as bulk
from recovery.bulk.selectors import counts_of, expired, history_page, ledger, operation
from recovery.models import BulkItem, BulkOperation, BulkStatus
from recovery.rules.bulk import ACTIONS
from recovery.words.bulk import bulk_item_text, bulk_line, bulk_predicted
from recovery.words.lines import plain
from tasks.api import BaseAPIView, idempotent, int_param, iso, page_limit, paginate
from tasks.auth import IsPerson
from tasks.errors import Forbidden
from tasks.selectors import memberships_of, visible_tasks


class CountsOut(serializers.Serializer):
    total = serializers.IntegerField()
    applied = serializers.IntegerField()
    skipped = serializers.IntegerField()
    failed = serializers.IntegerField()
    pending = serializers.IntegerField()
    untouched = serializers.IntegerField(help_text="Skipped because the operation was cancelled before them.")


class SampleOut(serializers.Serializer):
    task = serializers.IntegerField()
    title = serializers.CharField()
    state = serializers.CharField(help_text="The task's state when the preview froze it.")
    action = serializers.IntegerField(allow_null=True, help_text="The recovery action the item acts on.")
    would = serializers.ChoiceField(choices=("apply", "skip"))
    reason = serializers.CharField(allow_blank=True)
    detail = serializers.CharField(allow_blank=True)


class ItemOut(serializers.Serializer):
    position = serializers.IntegerField()
    task = serializers.IntegerField()
    action = serializers.IntegerField(allow_null=True)
    version = serializers.IntegerField(allow_null=True, help_text="The action's version the preview saw.")
    result = serializers.ChoiceField(choices=("", "applied", "skipped", "failed"), help_text='"" until reached.')
    reason = serializers.CharField(allow_blank=True)
    detail = serializers.CharField(allow_blank=True, help_text="In words, from the presenter.")
    run = serializers.IntegerField(allow_null=True, help_text="The run the item's change queued.")
    done_at = serializers.DateTimeField(allow_null=True)


class BulkOut(serializers.Serializer):
    id = serializers.IntegerField()
    action = serializers.ChoiceField(choices=ACTIONS)
    params = serializers.DictField()
    selection = serializers.DictField()
    status = serializers.ChoiceField(choices=BulkStatus.choices)
    expired = serializers.BooleanField()
    actor = serializers.CharField()
    count = serializers.IntegerField(help_text="The frozen scope's size.")
    counts = CountsOut()
    refusals = serializers.DictField(child=serializers.IntegerField(), help_text="Predicted at the preview.")
    scope_hash = serializers.CharField()
    expires_at = serializers.DateTimeField()
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    cancelled_by = serializers.CharField(allow_null=True)
    retry_of = serializers.IntegerField(allow_null=True)
    status_text = serializers.CharField()


class PreviewOut(BulkOut):
    sample = SampleOut(many=True)


class DetailOut(BulkOut):
    items = ItemOut(many=True)
    items_next = serializers.CharField(allow_null=True, help_text="The next page of items (`?after=<position>`).")


class BulkPageOut(serializers.Serializer):
    results = BulkOut(many=True)
    next = serializers.URLField(allow_null=True)


def op_data(user, op: BulkOperation, counts=None) -> dict:
    counts = counts or counts_of(user, [op.pk])[op.pk]
    is_expired = expired(op)
    return {
        "id": op.pk,
        "action": op.action,
        "params": op.params,
        "selection": op.selection,
        "status": op.status,
        "expired": is_expired,
        "actor": op.actor_name,
        "count": op.count,
        "counts": counts.as_dict(),
        "refusals": op.refusals,
        "scope_hash": op.scope_hash,
        "expires_at": iso(op.expires_at),
        "created_at": iso(op.created_at),
        "started_at": iso(op.started_at),
        "finished_at": iso(op.finished_at),
        "cancelled_by": op.cancelled_by or None,
        "retry_of": op.retry_of_id,
        "status_text": plain(bulk_line(op, counts, expired=is_expired)),
    }


def sample_data(user, op: BulkOperation) -> list[dict]:
    items = BulkItem.objects.filter(op=op, task__in=visible_tasks(user)).select_related("task").order_by("position")
    return [
        {
            "task": i.task_id,
            "title": i.task.title,
            "state": i.seen.get("state", ""),
            "action": i.action_id,
            "would": "skip" if i.predicted else "apply",
            "reason": i.predicted,
            "detail": bulk_predicted(i.predicted),
        }
        for i in items[: bulk.SAMPLE]
    ]


def item_data(op: BulkOperation, item: BulkItem) -> dict:
    return {
        "position": item.position,
        "task": item.task_id,
        "action": item.action_id,
        "version": item.version,
        "result": item.result,
        "reason": item.reason,
        "detail": bulk_item_text(op.action, op.params, item),
        "run": item.run_id,
        "done_at": iso(item.done_at),
    }


class OperatorView(BaseAPIView):
    permission_classes = [IsPerson]


def _org_id(request) -> int | None:
    slug = request.data.get("org") if isinstance(request.data, dict) else None
    if not slug:
        return None
    membership = next((m for m in memberships_of(request.user) if m.org.slug == slug), None)
    if membership is None:
        raise Forbidden("You are not a member of that organization.")
    return membership.org_id


class BulkListView(OperatorView):
    class BulkInputSerializer(serializers.Serializer):
        action = serializers.ChoiceField(choices=ACTIONS)
        ids = serializers.ListField(child=serializers.JSONField(), required=False, allow_null=True)
        filter = serializers.JSONField(required=False, allow_null=True)
        params = serializers.JSONField(required=False, allow_null=True)
        org = serializers.SlugField(required=False)

    @extend_schema(
        parameters=[OpenApiParameter("cursor", int), OpenApiParameter("limit", int)],
        responses=BulkPageOut,
        operation_id="bulk_list",
    )
    def get(self, request):
        rows, cursor = history_page(request.user, cursor=int_param(request, "cursor"), limit=page_limit(request))
        data = [op_data(request.user, op, counts) for op, counts in rows]
        return Response(paginate(request, data, cursor_param="cursor", cursor_value=cursor))

    @extend_schema(request=BulkInputSerializer, responses={201: PreviewOut})
    def post(self, request):
        data = self.BulkInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        org_id = _org_id(request)

        def handle():
            op = bulk.bulk_preview(
                user=request.user,
                action=v["action"],
                ids=v.get("ids"),
                filter=v.get("filter"),
                params=v.get("params"),
                org_id=org_id,
            )
            return Response({**op_data(request.user, op), "sample": sample_data(request.user, op)}, status=201)

        return idempotent(request, handle)


class BulkDetailView(OperatorView):
    @extend_schema(
        parameters=[
            OpenApiParameter("result", str, enum=["applied", "skipped", "failed", "pending"]),
            OpenApiParameter("after", int, description="Items after this position."),
            OpenApiParameter("limit", int),
        ],
        responses=DetailOut,
    )
    def get(self, request, op_id: int):
        op = operation(request.user, op_id)
        items, after = ledger(
            request.user,
            op,
            result=request.query_params.get("result", ""),
            after=int_param(request, "after"),
            limit=page_limit(request, default=500, maximum=5000),
        )
        page = paginate(request, [item_data(op, i) for i in items], cursor_param="after", cursor_value=after)
        return Response({**op_data(request.user, op), "items": page["results"], "items_next": page["next"]})


class BulkExecuteView(OperatorView):
    class ExecuteInputSerializer(serializers.Serializer):
        scope_hash = serializers.CharField(max_length=64)

    @extend_schema(request=ExecuteInputSerializer, responses={202: BulkOut})
    def post(self, request, op_id: int):
        operation(request.user, op_id)
        data = self.ExecuteInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)

        def handle():
            op = bulk.bulk_execute(user=request.user, op_id=op_id, scope_hash=data.validated_data["scope_hash"])
            return Response(op_data(request.user, op), status=status.HTTP_202_ACCEPTED)

        return idempotent(request, handle)


class BulkCancelView(OperatorView):
    @extend_schema(request=None, responses=BulkOut)
    def post(self, request, op_id: int):
        operation(request.user, op_id)

        def handle():
            return Response(op_data(request.user, bulk.bulk_cancel(user=request.user, op_id=op_id)))

        return idempotent(request, handle)


class BulkRetryFailedView(OperatorView):
    class RetryFailedInputSerializer(serializers.Serializer):
        accept_duplicate_risk = serializers.BooleanField(required=False, default=False)

    @extend_schema(request=RetryFailedInputSerializer, responses={201: PreviewOut})
    def post(self, request, op_id: int):
        operation(request.user, op_id)
        data = self.RetryFailedInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)

        def handle():
            op = bulk.bulk_retry_failed(
                user=request.user, op_id=op_id, accept_duplicate_risk=data.validated_data["accept_duplicate_risk"]
            )
            return Response({**op_data(request.user, op), "sample": sample_data(request.user, op)}, status=201)

        return idempotent(request, handle)
