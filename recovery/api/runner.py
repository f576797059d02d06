"""The runner API's recovery endpoints: a worker's report of the workspace it holds (recovery/workspaces/reports.py)."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response

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
