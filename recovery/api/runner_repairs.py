"""Runner API for repair jobs (spec: repair jobs): a worker holding workspaces takes the repairs of its label and
reports what it did on its disk (recovery/workspaces/repair_jobs.py)."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response

from recovery.api import schemas
from recovery.api.views import repair_data
from recovery.workspaces import repair_jobs
from tasks.api import RunnerView, idempotent


class PlanStepOut(serializers.Serializer):
    seq = serializers.IntegerField()
    tool = serializers.CharField()
    paths = serializers.ListField(child=serializers.JSONField())
    all = serializers.BooleanField()


class RepairJobOut(serializers.Serializer):
    repair = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=("reconcile", "reissue"))
    task = serializers.IntegerField()
    org = serializers.CharField()
    workspace_key = serializers.CharField()
    hint = serializers.CharField()
    manifest = serializers.ListField(child=serializers.JSONField())
    plan = PlanStepOut(many=True)


class RepairClaimView(RunnerView):
    """`POST {"worker", "label"}`: the oldest repair job for workspaces of `label` in the worker's organization
    (200), or none (204)."""

    class RepairClaimInputSerializer(serializers.Serializer):
        worker = serializers.CharField(max_length=100)  # the instance label, as a run claim's `worker`
        label = serializers.CharField(max_length=100)  # the label of the workspaces it holds

    @extend_schema(request=RepairClaimInputSerializer, responses={200: RepairJobOut, 204: None})
    def post(self, request):
        data = self.RepairClaimInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data

        def handle():
            job = repair_jobs.repair_claim(worker=request.user, instance=v["worker"], label=v["label"])
            if job is None:
                return Response(status=status.HTTP_204_NO_CONTENT)
            return Response(repair_jobs.job_data(job))

        return idempotent(request, handle)


class RepairResultView(RunnerView):
    """`POST {"worker", "ok", "result"?, "error"?}`: what the claimer did; answers the repair as it was recorded."""

    class RepairResultInputSerializer(serializers.Serializer):
        worker = serializers.CharField(max_length=100)
        ok = serializers.BooleanField()
        result = serializers.JSONField(required=False, allow_null=True, default=None)
        error = serializers.JSONField(required=False, allow_null=True, default=None)

    @extend_schema(request=RepairResultInputSerializer, responses=schemas.RepairOut)
    def post(self, request, repair_id: int):
        data = self.RepairResultInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data

        def handle():
            job = repair_jobs.repair_report(
                worker=request.user,
                instance=v["worker"],
                repair_id=repair_id,
                ok=v["ok"],
                result=v.get("result"),
                error=v.get("error"),
            )
            return Response(repair_data(job))

        return idempotent(request, handle)
