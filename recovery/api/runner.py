"""The runner API's recovery endpoints for a worker that holds workspaces on its own disk: its report of a
workspace before a continuation (recovery/workspaces/reports.py), and exports it copies itself
(recovery/workspaces/exports.py)."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response

from recovery.workspaces.exports import export_job_claim, export_job_finish
from recovery.workspaces.reports import workspace_reported
from tasks.api import RunnerView, idempotent


class WorkspaceReportView(RunnerView):
    class WorkspaceReportIn(serializers.Serializer):
        epoch = serializers.IntegerField()
        root = serializers.CharField(max_length=1000, required=False, allow_blank=True, trim_whitespace=False)
        label = serializers.CharField(max_length=100, required=False, allow_blank=True)
        checked = serializers.IntegerField(min_value=0, required=False, default=0)
        complete = serializers.BooleanField(required=False, default=True)
        more = serializers.IntegerField(min_value=0, required=False, default=0)
        files = serializers.JSONField()

    @extend_schema(request=WorkspaceReportIn, responses={200: dict})
    def post(self, request, run_id: int):
        data = self.WorkspaceReportIn(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data

        def handle():
            return Response(workspace_reported(worker=request.user, run_id=run_id, epoch=v["epoch"], body=dict(v)))

        return idempotent(request, handle)


class ExportClaimView(RunnerView):
    class ExportClaimIn(serializers.Serializer):
        worker = serializers.CharField(max_length=100, required=False, allow_blank=True)
        label = serializers.CharField(max_length=100)

    @extend_schema(request=ExportClaimIn, responses={200: dict, 204: None})
    def post(self, request):
        data = self.ExportClaimIn(data=request.data)
        data.is_valid(raise_exception=True)
        job = export_job_claim(worker=request.user, label=data.validated_data["label"])
        return Response(job) if job is not None else Response(status=status.HTTP_204_NO_CONTENT)


class ExportResultView(RunnerView):
    class ExportResultIn(serializers.Serializer):
        ok = serializers.BooleanField()
        result = serializers.JSONField(required=False, default=dict)
        error = serializers.CharField(required=False, allow_blank=True, default="", max_length=5000)

    @extend_schema(request=ExportResultIn, responses={200: dict})
    def post(self, request, export_id: int):
        data = self.ExportResultIn(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data

        def handle():
            export = export_job_finish(
                worker=request.user, export_id=export_id, ok=v["ok"], result=v["result"], error=v["error"]
            )
            return Response({"export": export.pk, "ok": export.ok, "error": export.error or None,
                             "counts": (export.result or {}).get("counts", {})})  # fmt: skip

        return idempotent(request, handle)
