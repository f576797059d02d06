"""The runner API, the event feed, and the API's shared conventions (idempotency, pagination, limits)."""

import hashlib
import json
from urllib.parse import urlencode

from django.conf import settings
from django.db import IntegrityError, transaction
from drf_spectacular.utils import OpenApiParameter, PolymorphicProxySerializer, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from tasks import catalogue, export_roots, schemas, services, worker_workspaces
from tasks.auth import IsPerson, IsWorker
from tasks.authz import require_role
from tasks.errors import IdempotencyConflict, Invalid, NotFound, PayloadTooLarge, ServiceError
from tasks.models import IdempotencyRecord, Message, RecoveryMode, Role, Run, RunKind, Step, Worker
from tasks.selectors import memberships_of, visible_events

# --- conventions -------------------------------------------------------------


class BaseAPIView(APIView):
    """Refuses oversized bodies before parsing them, so nothing of them is written."""

    def initial(self, request, *args, **kwargs):
        length = request.META.get("CONTENT_LENGTH") or "0"
        if length.isdigit() and int(length) > settings.CONSOLE_MAX_PAYLOAD:
            raise PayloadTooLarge("The request body is larger than 8 MiB; nothing was saved.")
        super().initial(request, *args, **kwargs)


def _principal(user) -> str:
    if isinstance(user, Worker):
        return f"worker:{user.pk}"
    return f"user:{user.pk}"


def _fingerprint(request) -> str:
    body = request.data if isinstance(request.data, dict | list) else {}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(f"{request.method} {request.path}\n{canonical}".encode()).hexdigest()


MAX_IDEMPOTENCY_KEY = IdempotencyRecord._meta.get_field("key").max_length


def _run_of(request, response, run_of) -> int | None:
    kwargs = (getattr(request, "parser_context", None) or {}).get("kwargs") or {}
    run_id = kwargs.get("run_id")
    if run_id is None and run_of is not None and isinstance(response.data, dict):
        run_id = run_of(response.data)
    return run_id if isinstance(run_id, int) and not isinstance(run_id, bool) else None


def idempotent(request, handler, *, run_of=None) -> Response:
    """Run `handler` once per Idempotency-Key.

    The same key and body returns the first (successful) response again and
    does nothing more; the same key with another body is 409. The record is
    written in the same transaction as the effect, so two concurrent requests
    with one key cannot both take effect: the loser's transaction rolls back
    on the unique key and it answers with the winner's response.

    The record names the run its response is about — the path's `run_id`, or
    `run_of(response data)` (a claim) — so purging that run's checkpoint
    purges the record too (recovery/supervisor/retention.py).
    """
    key = request.headers.get("Idempotency-Key")
    if not key:
        return handler()
    if len(key) > MAX_IDEMPOTENCY_KEY:
        # Never truncated: two different long keys would collide and replay each other's response.
        raise Invalid(
            f"An Idempotency-Key holds at most {MAX_IDEMPOTENCY_KEY} characters; this one has {len(key)}.",
            code="invalid",
            field="Idempotency-Key",
        )
    principal = _principal(request.user)
    fingerprint = _fingerprint(request)

    def replay() -> Response | None:
        record = IdempotencyRecord.objects.filter(principal=principal, key=key).first()
        if record is None:
            return None
        if record.fingerprint != fingerprint:
            raise IdempotencyConflict("This Idempotency-Key was already used with a different request.")
        return Response(record.response, status=record.status_code, headers={"Idempotent-Replayed": "true"})

    previous = replay()
    if previous is not None:
        return previous
    try:
        with transaction.atomic():
            response = handler()
            if 200 <= response.status_code < 300:
                IdempotencyRecord.objects.create(
                    principal=principal,
                    key=key,
                    fingerprint=fingerprint,
                    status_code=response.status_code,
                    response=response.data,
                    run_id=_run_of(request, response, run_of),
                )
            return response
    except IntegrityError:
        previous = replay()
        if previous is None:
            raise
        return previous


def paginate(request, items: list, *, cursor_param: str, cursor_value) -> dict:
    """`{"results", "next"}` where `next` carries the keyset cursor of the last item."""
    next_url = None
    if cursor_value is not None:
        params = request.query_params.copy()
        params[cursor_param] = cursor_value
        next_url = request.build_absolute_uri(request.path) + "?" + urlencode(params)
    return {"results": items, "next": next_url}


def page_limit(request, default: int = 50, maximum: int = 500) -> int:
    raw = request.query_params.get("limit")
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ServiceError("`limit` must be an integer.", field="limit") from exc
    return max(1, min(value, maximum))


def int_param(request, name: str) -> int | None:
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return None
    try:
        return int(raw)
    except ValueError as exc:
        raise ServiceError(f"`{name}` must be an integer.", field=name) from exc


def iso(value) -> str | None:
    return value.isoformat() if value else None


# --- presenters ----------------------------------------------------------------


def message_data(message: Message, *, waiting_reason: str | None = None) -> dict:
    """A follow-up as the operator API shows it. `waiting_reason`, when given, is the reason derived from the
    facts now (recovery.actions.followups); the saved column is only the last one the supervisor recorded."""
    return {
        "id": message.pk,
        "body": message.body,
        "author": _author(message),
        "created_at": iso(message.created_at),
        "status": message.status,
        "waiting_reason": message.waiting_reason if waiting_reason is None else waiting_reason,
        "run": message.run_id,
        "read_at": iso(message.read_at),
    }


def _author(message: Message) -> str | None:
    return message.author.username if message.author_id and message.author else None


def claimed_message(message: Message) -> dict:
    """A follow-up as a claim hands it to the worker (API.md: `{"id", "author", "created_at", "body"}`)."""
    return {"id": message.pk, "author": _author(message), "created_at": iso(message.created_at), "body": message.body}


def step_data(step: Step) -> dict:
    return {
        "seq": step.seq,
        "parent_seq": step.parent_seq,
        "tool": step.tool,
        "args": step.args,
        "phase": step.phase,
        "recovery_mode": step.recovery_mode,
        "result": step.result,
        "error": step.error or None,
        "reused": step.reused_from_id is not None,
        "usage": step.usage,
        "usage_detail": step.usage_detail,
        "planned_at": iso(step.planned_at),
        "dispatched_at": iso(step.dispatched_at),
        "completed_at": iso(step.completed_at),
    }


def claim_data(run: Run) -> dict:
    """What a worker gets with a claim (API.md, Runner API and Agent runs).

    `reused` is every saved step the run carries from its chain (a batch item or a tool call of an agent run
    may be a saved failure, `ok` false: it stays failed, it is not run again); a step the agent gets a notice
    for instead of a result is in `notices`, never in `reused`. `next_seq` is one more than the highest
    top-level number the chain planned (a number of the chain the run does not carry may be planned again).
    """
    carry = run.carry or {}
    notices = [n for n in carry.get("notices", []) if isinstance(n, dict)]
    noticed = {(n.get("parent_seq"), n.get("seq")) for n in notices}
    fields = ("seq", "parent_seq", "tool", "args", "result", "phase", "error", "reused_from")
    carried = list(
        run.steps.filter(reused_from__isnull=False)
        .order_by("seq")
        .select_related("reused_from")
        .only(*fields, "reused_from__usage", "reused_from__usage_detail")
    )
    reused = [
        {
            "seq": s.seq,
            "parent_seq": s.parent_seq,
            "tool": s.tool,
            "args": s.args,
            "result": s.result,
            "ok": s.phase == "completed",
            "error": s.error or None,
            # What the saved step cost when it ran (the carried copy costs nothing).
            "usage": s.reused_from.usage,
            "usage_detail": s.reused_from.usage_detail,
        }
        for s in carried
        if (s.parent_seq, s.seq) not in noticed
    ]
    held = [s.seq for s in carried if s.parent_seq is None]
    held += [d.get("seq") for d in carry.get("dropped", []) if isinstance(d, dict) and not d.get("parent_seq")]
    held += [n.get("seq") for n in notices if not n.get("parent_seq")]
    # Steps of the chain this run did not carry (the agent plans them again) count as planned.
    held += [r.get("seq") for r in carry.get("rerun", []) if isinstance(r, dict)]
    messages = [claimed_message(m) for m in run.messages.select_related("author").order_by("created_at", "id")]
    return {
        "run": run.pk,
        "task": run.task_id,
        "agent": run.agent.name,
        "kind": run.kind,
        "attempt": run.attempt,
        "lease_epoch": run.lease_epoch,
        "lease_expires_at": iso(run.lease_expires_at),
        "lease_seconds": settings.CONSOLE_LEASE_SECONDS,
        "heartbeat_seconds": settings.CONSOLE_HEARTBEAT_SECONDS,
        "input": run.input,
        "reused": reused,
        "notices": notices,
        "next_seq": 1 + max((h for h in held if isinstance(h, int)), default=0),
        "messages": messages,
        "dropped": list(carry.get("dropped", [])),
        "workspace": run.task.workspace,
        "workspace_key": services.workspace_key_of(run.task),
        **_workspace_check(run),
    }


def _workspace_check(run: Run) -> dict:
    """For a continuation whose workspace a worker holds: the manifest it compares its disk with before running
    anything (what a person declared a step wrote is set apart by the server when the report comes)."""
    if not services.awaits_validation(run):
        return {}
    return {"workspace_check": {"manifest": worker_workspaces.manifest_wire(run.task)}}


# --- runner API ------------------------------------------------------------------


class EpochIn(serializers.Serializer):
    epoch = serializers.IntegerField()


class RunnerView(BaseAPIView):
    permission_classes = [IsWorker]


class ClaimView(RunnerView):
    class ClaimInputSerializer(serializers.Serializer):
        worker = serializers.CharField(max_length=100, required=False, allow_blank=True)
        # Narrow the claim: only runs of these agents (names) / of these kinds. Absent: any run, as before.
        agents = serializers.ListField(
            child=serializers.CharField(max_length=100), required=False, allow_null=True, max_length=100
        )
        kinds = serializers.ListField(
            child=serializers.ChoiceField(choices=RunKind.choices), required=False, allow_null=True, max_length=2
        )
        # The worker holds its tasks' workspaces on its own disk: {"label", "root"} (tasks.worker_workspaces).
        workspaces = serializers.JSONField(required=False, allow_null=True)

    @extend_schema(request=ClaimInputSerializer, responses={200: schemas.ClaimOut, 204: None})
    def post(self, request):
        data = self.ClaimInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)

        def handle():
            v = data.validated_data
            run = services.run_claim(
                worker=request.user,
                label=v.get("worker", ""),
                agents=v.get("agents"),
                kinds=v.get("kinds"),
                workspaces=v.get("workspaces"),
            )
            if run is None:
                return Response(status=status.HTTP_204_NO_CONTENT)
            return Response(claim_data(run))

        return idempotent(request, handle, run_of=lambda data: data.get("run"))


class HeartbeatView(RunnerView):
    @extend_schema(request=EpochIn, responses=schemas.HeartbeatOut)
    def post(self, request, run_id: int):
        data = EpochIn(data=request.data)
        data.is_valid(raise_exception=True)

        def handle():
            run = services.run_heartbeat(worker=request.user, run_id=run_id, epoch=data.validated_data["epoch"])
            return Response({"lease_expires_at": iso(run.lease_expires_at), "stop_requested": run.status == "stopping"})

        return idempotent(request, handle)


class PlanCallIn(serializers.Serializer):
    seq = serializers.IntegerField(min_value=1, max_value=services.MAX_SEQ)
    tool = serializers.CharField(max_length=100)
    args = serializers.JSONField(required=False, default=dict)
    parent_seq = serializers.IntegerField(min_value=1, max_value=services.MAX_SEQ, required=False, allow_null=True)


class StepPlanView(RunnerView):
    class StepPlanInputSerializer(serializers.Serializer):
        """One step (`seq`, `tool`, `args`, `parent_seq`?) or a batch of them (`steps`, at most 64), not both."""

        epoch = serializers.IntegerField()
        seq = serializers.IntegerField(min_value=1, max_value=services.MAX_SEQ, required=False)
        tool = serializers.CharField(max_length=100, required=False)
        args = serializers.JSONField(required=False, default=dict)
        parent_seq = serializers.IntegerField(min_value=1, max_value=services.MAX_SEQ, required=False, allow_null=True)
        steps = PlanCallIn(many=True, required=False, max_length=services.MAX_BATCH, min_length=1)
        # One step planned and dispatched in one transaction: the worker calls it right after the answer.
        dispatch = serializers.BooleanField(required=False, default=False)

        def validate(self, data):
            single = "seq" in data or "tool" in data
            if "steps" in data and single:
                raise serializers.ValidationError("Plan one step (`seq`, `tool`) or a batch (`steps`), not both.")
            if "steps" in data and data.get("dispatch"):
                raise serializers.ValidationError(
                    "`dispatch` plans and dispatches one step; a batch is dispatched step by step."
                )
            if "steps" not in data and not ("seq" in data and "tool" in data):
                raise serializers.ValidationError("Plan one step (`seq` and `tool`) or a batch (`steps`).")
            return data

    @extend_schema(
        request=StepPlanInputSerializer,
        responses={
            201: PolymorphicProxySerializer(
                component_name="StepPlanResult",
                serializers=[schemas.StepPlannedOut, schemas.StepBatchPlannedOut],
                resource_type_field_name=None,
            )
        },
    )
    def post(self, request, run_id: int):
        data = self.StepPlanInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data

        def planned(step) -> dict:
            return {"seq": step.seq, "phase": step.phase, "recovery_mode": step.recovery_mode}

        def handle():
            if "steps" in v:
                steps = services.step_plan_batch(
                    worker=request.user, run_id=run_id, epoch=v["epoch"], steps=[dict(c) for c in v["steps"]]
                )
                return Response({"steps": [planned(s) for s in steps]}, status=status.HTTP_201_CREATED)
            plan = services.step_plan_dispatch if v.get("dispatch") else services.step_plan
            step = plan(
                worker=request.user,
                run_id=run_id,
                epoch=v["epoch"],
                seq=v["seq"],
                tool=v["tool"],
                args=v.get("args"),
                parent_seq=v.get("parent_seq"),
            )
            return Response(planned(step), status=status.HTTP_201_CREATED)

        return idempotent(request, handle)


class StepDispatchView(RunnerView):
    @extend_schema(request=EpochIn, responses=schemas.StepDispatchedOut)
    def post(self, request, run_id: int, seq: int):
        data = EpochIn(data=request.data)
        data.is_valid(raise_exception=True)

        def handle():
            step = services.step_dispatch(
                worker=request.user, run_id=run_id, epoch=data.validated_data["epoch"], seq=seq
            )
            return Response({"seq": step.seq, "phase": step.phase})

        return idempotent(request, handle)


class StepCompleteView(RunnerView):
    class StepCompleteInputSerializer(serializers.Serializer):
        epoch = serializers.IntegerField()
        ok = serializers.BooleanField()
        result = serializers.JSONField(required=False, allow_null=True, default=None)
        error = serializers.CharField(required=False, allow_null=True, allow_blank=True, default="")
        # Units (an integer), or a model turn's tokens: {"input_tokens", "output_tokens", "cost"?}.
        usage = serializers.JSONField(required=False, allow_null=True, default=None)
        result_too_large = serializers.BooleanField(required=False, default=False)
        # Workspace-relative paths the step changed; the server reads them on disk itself.
        files = serializers.ListField(
            child=serializers.CharField(max_length=1000, trim_whitespace=False),
            required=False,
            allow_null=True,
            max_length=10_000,
        )
        # What the step wrote, read by a worker that holds the workspace on its own disk (tasks.worker_workspaces).
        workspace = serializers.JSONField(required=False, allow_null=True, default=None)

    @extend_schema(request=StepCompleteInputSerializer, responses=schemas.StepCompletedOut)
    def post(self, request, run_id: int, seq: int):
        data = self.StepCompleteInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data

        def handle():
            step, stop = services.step_complete(
                worker=request.user,
                run_id=run_id,
                epoch=v["epoch"],
                seq=seq,
                ok=v["ok"],
                result=v.get("result"),
                error=v.get("error") or "",
                usage=v.get("usage"),
                result_too_large=v.get("result_too_large", False),
                files=v.get("files"),
                workspace=v.get("workspace"),
            )
            return Response({"seq": step.seq, "phase": step.phase, "stop_requested": stop})

        return idempotent(request, handle)


class FinishView(RunnerView):
    class FinishInputSerializer(serializers.Serializer):
        epoch = serializers.IntegerField()
        status = serializers.CharField()
        error_code = serializers.CharField(required=False, allow_blank=True, allow_null=True, default="", max_length=64)
        detail = serializers.CharField(required=False, allow_blank=True, allow_null=True, default="")
        # What the agent returned (any JSON within the payload limits).
        output = serializers.JSONField(required=False, allow_null=True, default=None)
        # With "error_code": "diverged": {"seq", "saved": {"tool", "args"}, "asked": {"tool", "args"}}.
        diverged = serializers.JSONField(required=False, allow_null=True, default=None)

    @extend_schema(request=FinishInputSerializer, responses=schemas.FinishOut)
    def post(self, request, run_id: int):
        data = self.FinishInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data

        def handle():
            run = services.run_finish(
                worker=request.user,
                run_id=run_id,
                epoch=v["epoch"],
                status=v["status"],
                error_code=v.get("error_code") or "",
                detail=v.get("detail") or "",
                output=v.get("output"),
                diverged=v.get("diverged"),
            )
            return Response(
                {
                    "run": run.pk,
                    "id": run.pk,
                    "kind": run.kind,
                    "status": run.status,
                    "error_code": run.error_code,
                    "stop_receipt": run.stop_receipt,
                    "output": run.output,
                    "diverged": run.diverged,
                }
            )

        return idempotent(request, handle)


class CatalogueToolIn(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    mode = serializers.ChoiceField(choices=RecoveryMode.choices)
    description = serializers.CharField(
        required=False, allow_blank=True, default="", max_length=catalogue.MAX_DESCRIPTION
    )


class AgentToolsView(RunnerView):
    """`POST {"tools": [{"name", "mode", "description"?}]}`: this agent's tool catalogue from now on."""

    class AgentToolsInputSerializer(serializers.Serializer):
        tools = CatalogueToolIn(many=True, max_length=catalogue.MAX_TOOLS)

    @extend_schema(request=AgentToolsInputSerializer, responses=schemas.AgentToolsOut)
    def post(self, request, name: str):
        data = self.AgentToolsInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        tools = [dict(t) for t in data.validated_data["tools"]]

        def handle():
            agent, registered = catalogue.tools_register(worker=request.user, agent=name, tools=tools)
            return Response({"agent": agent.name, "tools": [t.as_dict() for t in registered]})

        return idempotent(request, handle)


class MessagesAckView(RunnerView):
    class MessagesAckInputSerializer(serializers.Serializer):
        epoch = serializers.IntegerField()
        ids = serializers.ListField(child=serializers.IntegerField(min_value=1), max_length=services.MAX_ACK_IDS)

    @extend_schema(request=MessagesAckInputSerializer, responses=schemas.MessagesAckOut)
    def post(self, request, run_id: int):
        data = self.MessagesAckInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data

        def handle():
            read = services.messages_ack(worker=request.user, run_id=run_id, epoch=v["epoch"], ids=v["ids"])
            return Response({"acknowledged": read})

        return idempotent(request, handle)


class ChildTaskView(RunnerView):
    class ChildTaskInputSerializer(serializers.Serializer):
        epoch = serializers.IntegerField()
        title = serializers.CharField(max_length=300)
        input = serializers.JSONField()
        agent = serializers.CharField(max_length=100, required=False, allow_blank=True, default="")

    @extend_schema(request=ChildTaskInputSerializer, responses={201: schemas.ChildTaskOut})
    def post(self, request, run_id: int):
        data = self.ChildTaskInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data

        def handle():
            task = services.task_create_child(
                worker=request.user,
                run_id=run_id,
                epoch=v["epoch"],
                title=v["title"],
                input=v["input"],
                agent=v["agent"],
            )
            return Response({"task": task.pk, "parent": task.parent_id}, status=status.HTTP_201_CREATED)

        return idempotent(request, handle)


# --- events ------------------------------------------------------------------------


def event_data(event) -> dict:
    return {
        "id": event.pk,
        "kind": event.kind,
        "task": event.task_id,
        "run": event.run_id,
        "actor": event.actor,
        "payload": event.payload,
        "created_at": iso(event.created_at),
    }


class EventListView(BaseAPIView):
    permission_classes = [IsPerson]

    @extend_schema(
        parameters=[
            OpenApiParameter("after", int, description="Return events with an id greater than this."),
            OpenApiParameter("task", int, description="Only this task's events."),
            OpenApiParameter("limit", int),
        ],
        responses=schemas.EventPageOut,
    )
    def get(self, request):
        after = int_param(request, "after") or 0
        task_id = int_param(request, "task")
        limit = page_limit(request, default=200, maximum=1000)
        qs = visible_events(request.user).filter(id__gt=after).order_by("id")
        if task_id is not None:
            qs = qs.filter(task_id=task_id)
        events = list(qs[: limit + 1])
        more = len(events) > limit
        events = events[:limit]
        cursor = events[-1].pk if more else None
        return Response(paginate(request, [event_data(e) for e in events], cursor_param="after", cursor_value=cursor))


# --- export roots (admin) ----------------------------------------------------


def _admin_org(request) -> int:
    """The organization an admin's export-root call acts on: `org` (a slug) or the person's first membership."""
    slug = request.query_params.get("org") or (request.data.get("org") if isinstance(request.data, dict) else None)
    ms = memberships_of(request.user)
    m = next((m for m in ms if m.org.slug == slug), None) if slug else (ms[0] if ms else None)
    if m is None:
        raise NotFound("No such organization.")
    return m.org_id


class ExportRootOut(serializers.Serializer):
    id = serializers.IntegerField()
    path = serializers.CharField()
    added_by = serializers.CharField()
    reason = serializers.CharField()
    created_at = serializers.DateTimeField()


class ExportRootPageOut(serializers.Serializer):
    results = ExportRootOut(many=True)
    next = serializers.CharField(allow_null=True)
    area = serializers.ListField(child=serializers.CharField())


def _root_data(root) -> dict:
    return {
        "id": root.pk,
        "path": root.path,
        "added_by": root.added_by,
        "reason": root.reason,
        "created_at": iso(root.created_at),
    }


class ExportRootListView(BaseAPIView):
    """`GET` the organization's export roots; `POST {"path", "reason"?}` adds one (admin)."""

    permission_classes = [IsPerson]

    class ExportRootInputSerializer(serializers.Serializer):
        path = serializers.CharField(max_length=1000)
        reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=500)
        org = serializers.SlugField(required=False)

    @extend_schema(parameters=[OpenApiParameter("org", str)], responses=ExportRootPageOut)
    def get(self, request):
        org_id = _admin_org(request)
        require_role(request.user, org_id, Role.ADMIN)
        roots = [_root_data(r) for r in export_roots.export_roots(org_id)]
        return Response({"results": roots, "next": None, "area": export_roots.export_area()})

    @extend_schema(request=ExportRootInputSerializer, responses={201: ExportRootOut})
    def post(self, request):
        org_id = _admin_org(request)
        data = self.ExportRootInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data

        def handle():
            root = export_roots.export_root_add(actor=request.user, org_id=org_id, path=v["path"], reason=v["reason"])
            return Response(_root_data(root), status=status.HTTP_201_CREATED)

        return idempotent(request, handle)


class ExportRootDetailView(BaseAPIView):
    """`DELETE` removes an export root (admin): tasks exporting under it are refused from the next export on."""

    permission_classes = [IsPerson]

    @extend_schema(parameters=[OpenApiParameter("org", str)], responses={204: None})
    def delete(self, request, root_id: int):
        org_id = _admin_org(request)

        def handle():
            export_roots.export_root_remove(actor=request.user, org_id=org_id, root_id=root_id)
            return Response(status=status.HTTP_204_NO_CONTENT)

        return idempotent(request, handle)
