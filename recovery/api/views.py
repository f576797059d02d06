"""The operator API: tasks, runs, actions, decisions, messages (API.md)."""

from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response

from recovery import selectors
from recovery.actions import commands as actions
from recovery.actions import continue_from, controls, followups, start_over
from recovery.api import schemas
from recovery.api.shapes import action_data, attempt_data, run_data, task_data
from recovery.modes import current_modes
from recovery.words.lines import plain
from recovery.words.workspaces import repair_line
from recovery.workspaces import repairs
from recovery.workspaces import validation as workspaces
from tasks import services, throttles
from tasks.api import BaseAPIView, idempotent, int_param, message_data, page_limit, paginate
from tasks.auth import IsPerson
from tasks.authz import require_role
from tasks.errors import Forbidden, Invalid, NotFound
from tasks.models import Agent, RecoveryMode, Role, UnknownOutcome
from tasks.modes import default_mode
from tasks.selectors import memberships_of, visible_runs, visible_tasks
from tasks.workspace import wire

ID_MAX = 2**63 - 1  # ids and versions are 64-bit

TASK_STATES = (
    "needs_decision",
    "exhausted",
    "blocked",
    "running",
    "stopping",
    "queued",
    "done",
    "cancelled",
    "idle",
    "all",
)


class OperatorView(BaseAPIView):
    permission_classes = [IsPerson]


def get_task(user, task_id: int):
    task = visible_tasks(user).filter(pk=task_id).select_related("agent", "org").first()
    if task is None:
        raise NotFound(f"No task #{task_id}.")
    return task


def get_run(user, run_id: int):
    run = visible_runs(user).filter(pk=run_id).select_related("task", "agent").first()
    if run is None:
        raise NotFound(f"No run #{run_id}.")
    return run


class TaskListView(OperatorView):
    class TaskListInputSerializer(serializers.Serializer):
        title = serializers.CharField(max_length=300)
        agent = serializers.CharField(max_length=100)
        input = serializers.JSONField()
        parent = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=ID_MAX)
        budget_limit = serializers.IntegerField(
            required=False, allow_null=True, min_value=0, max_value=services.BUDGET_MAX
        )
        private = serializers.BooleanField(required=False, default=False)
        export_destination = serializers.CharField(required=False, allow_blank=True, default="", max_length=1000)
        org = serializers.SlugField(required=False, max_length=50)

    @extend_schema(
        parameters=[
            OpenApiParameter("state", str, enum=list(TASK_STATES)),
            OpenApiParameter("q", str),
            OpenApiParameter("cursor", int),
            OpenApiParameter("limit", int),
        ],
        responses=schemas.TaskPageOut,
        operation_id="tasks_list",
    )
    def get(self, request):
        state = request.query_params.get("state") or "all"
        if state not in TASK_STATES:
            raise Invalid(f"`state` must be one of {', '.join(TASK_STATES)}.", field="state")
        limit = page_limit(request)
        cursor = int_param(request, "cursor")
        tasks, next_cursor = selectors.task_page(
            request.user, state=state, q=request.query_params.get("q", ""), cursor=cursor, limit=limit
        )
        return Response(
            paginate(request, [task_data(t) for t in tasks], cursor_param="cursor", cursor_value=next_cursor)
        )

    @extend_schema(
        request=TaskListInputSerializer,
        responses={201: schemas.TaskOut},
        examples=[
            OpenApiExample(
                "a plan of one step",
                request_only=True,
                value={
                    "title": "Write the report",
                    "agent": "builder",
                    "input": {"steps": [{"tool": "sleep", "args": {"seconds": 0}}]},
                },
            )
        ],
    )
    def post(self, request):
        ms = memberships_of(request.user)
        org_slug = request.data.get("org") if isinstance(request.data, dict) else None
        if org_slug:
            ms = [m for m in ms if m.org.slug == org_slug]
        if not ms:
            raise Forbidden("You are not a member of an organization.")
        membership = require_role(request.user, ms[0].org_id, Role.OPERATOR)
        data = self.TaskListInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data

        def handle():
            task = services.task_create(
                org=membership.org,
                actor=request.user,
                creator=request.user,
                title=v["title"],
                agent=v["agent"],
                input=v["input"],
                parent=v.get("parent"),
                budget_limit=v.get("budget_limit"),
                private=v.get("private", False),
                export_destination=v.get("export_destination", ""),
            )
            return Response(task_data(selectors.task_detail(request.user, task.pk)), status=status.HTTP_201_CREATED)

        return idempotent(request, handle)


class TaskDetailView(OperatorView):
    @extend_schema(responses=schemas.TaskDetailOut)
    def get(self, request, task_id: int):
        get_task(request.user, task_id)
        actions.actions_retire_stale(task_id=task_id)
        return Response(task_data(selectors.task_detail(request.user, task_id), detail=True))


class RunDetailView(OperatorView):
    @extend_schema(responses=schemas.RunOut)
    def get(self, request, run_id: int):
        return Response(run_data(selectors.run_detail(request.user, run_id)))


class RunStopView(OperatorView):
    @extend_schema(request=None, responses=schemas.RunOut)
    def post(self, request, run_id: int):
        run = get_run(request.user, run_id)

        def handle():
            services.run_request_stop(actor=request.user, run=run)
            return Response(run_data(selectors.run_detail(request.user, run_id)))

        return idempotent(request, handle)


def get_action(user, action_id: int):
    action = selectors.action_detail(user, action_id)
    if action is None:
        raise NotFound(f"No recovery action #{action_id}.")
    return action


class ActionDetailView(OperatorView):
    @extend_schema(responses=schemas.ActionOut)
    def get(self, request, action_id: int):
        action = get_action(request.user, action_id)
        actions.actions_retire_stale(task_id=action.task_id)
        return Response(action_data(get_action(request.user, action_id), with_gate=True))


class VersionIn(serializers.Serializer):
    version = serializers.IntegerField(min_value=0, max_value=ID_MAX)


class ActionRetryView(OperatorView):
    class ActionRetryInputSerializer(VersionIn):
        accept_duplicate_risk = serializers.BooleanField(required=False, default=False)
        reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=actions.MAX_NOTE)

    @extend_schema(request=ActionRetryInputSerializer, responses={202: schemas.RetryOut})
    def post(self, request, action_id: int):
        get_action(request.user, action_id)
        data = self.ActionRetryInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data

        def handle():
            try:
                attempt = actions.action_retry(
                    action_id=action_id,
                    user=request.user,
                    version=v["version"],
                    accept_duplicate_risk=v["accept_duplicate_risk"],
                    reason=v["reason"],
                )
            except workspaces.WorkspaceHeld as held:
                return _held(held)
            action = get_action(request.user, action_id)
            return Response({**attempt_data(attempt), "action": action_data(action)}, status=status.HTTP_202_ACCEPTED)

        return idempotent(request, handle)


class ActionDecisionView(OperatorView):
    class ActionDecisionInputSerializer(VersionIn):
        outcome = serializers.ChoiceField(choices=actions.DECISIONS)
        note = serializers.CharField(required=False, allow_blank=True, default="", max_length=actions.MAX_NOTE)
        accept_duplicate_risk = serializers.BooleanField(required=False, default=False)

    @extend_schema(request=ActionDecisionInputSerializer, responses=schemas.ActionOut)
    def post(self, request, action_id: int):
        get_action(request.user, action_id)
        data = self.ActionDecisionInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        if v["note"].strip():
            throttles.check(request, throttles.NOTES)

        def handle():
            try:
                actions.action_decide(
                    action_id=action_id,
                    user=request.user,
                    version=v["version"],
                    outcome=v["outcome"],
                    note=v["note"],
                    accept_duplicate_risk=v["accept_duplicate_risk"],
                )
            except workspaces.WorkspaceHeld as held:
                return _held(held)
            return Response(action_data(get_action(request.user, action_id), with_gate=True))

        return idempotent(request, handle)


def _held(held: workspaces.WorkspaceHeld) -> Response:
    """A continuation refused by workspace validation: answered, not raised, so its saved evidence is kept."""
    return Response(held.as_dict(), status=held.status_code)


class ActionCancelView(OperatorView):
    @extend_schema(request=VersionIn, responses=schemas.ActionOut)
    def post(self, request, action_id: int):
        get_action(request.user, action_id)
        data = VersionIn(data=request.data)
        data.is_valid(raise_exception=True)

        def handle():
            actions.action_cancel(action_id=action_id, user=request.user, version=data.validated_data["version"])
            return Response(action_data(get_action(request.user, action_id), with_gate=True))

        return idempotent(request, handle)


class TaskPauseView(OperatorView):
    pause = True

    @extend_schema(request=None, responses=schemas.TaskDetailOut)
    def post(self, request, task_id: int):
        task = get_task(request.user, task_id)

        def handle():
            if self.pause:
                services.task_pause(actor=request.user, task=task)
            else:
                services.task_resume(actor=request.user, task=task)
            return Response(task_data(selectors.task_detail(request.user, task_id), detail=True))

        return idempotent(request, handle)


class TaskResumeView(TaskPauseView):
    pause = False


class TaskMessagesView(OperatorView):
    class MessageInputSerializer(serializers.Serializer):
        body = serializers.CharField(allow_blank=True, trim_whitespace=False, max_length=followups.MAX_BODY)

    @extend_schema(request=MessageInputSerializer, responses={201: schemas.MessageOut})
    def post(self, request, task_id: int):
        task = get_task(request.user, task_id)
        data = self.MessageInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        throttles.check(request, throttles.MESSAGES)

        def handle():
            message = followups.message_save(user=request.user, task=task, body=data.validated_data["body"])
            return Response(
                message_data(message, waiting_reason=message.waiting_reason), status=status.HTTP_201_CREATED
            )

        return idempotent(request, handle)


class TaskMessagesDeliverView(OperatorView):
    @extend_schema(request=None, responses={202: schemas.DeliveredOut})
    def post(self, request, task_id: int):
        get_task(request.user, task_id)

        def handle():
            ids = followups.messages_deliver(user=request.user, task_id=task_id)
            return Response({"task": task_id, "messages": ids}, status=status.HTTP_202_ACCEPTED)

        return idempotent(request, handle)


# --- task controls (DESIGN §6b) ---------------------------------------------------------


def _task_response(request, task_id: int, code=status.HTTP_200_OK) -> Response:
    return Response(task_data(selectors.task_detail(request.user, task_id), detail=True), status=code)


class TaskOwnerView(OperatorView):
    class OwnerInputSerializer(serializers.Serializer):
        agent = serializers.CharField(max_length=100)
        reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=500)

    @extend_schema(request=OwnerInputSerializer, responses=schemas.TaskDetailOut)
    def post(self, request, task_id: int):
        get_task(request.user, task_id)
        data = self.OwnerInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data

        def handle():
            controls.task_reassign(user=request.user, task_id=task_id, agent=v["agent"], reason=v["reason"])
            return _task_response(request, task_id)

        return idempotent(request, handle)


class TaskContinueView(OperatorView):
    class ContinueInputSerializer(serializers.Serializer):
        note = serializers.CharField(required=False, allow_blank=True, default="", max_length=500)

    @extend_schema(request=ContinueInputSerializer, responses={202: schemas.QueuedRunOut})
    def post(self, request, task_id: int):
        get_task(request.user, task_id)
        data = self.ContinueInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)

        def handle():
            done = controls.task_continue(user=request.user, task_id=task_id, note=data.validated_data["note"])
            if done.run is None:
                # Answered, not raised: the decision it opened (if any) is kept.
                refusal = done.refusal()
                return Response(refusal.as_dict(), status=refusal.status_code)
            run = done.run
            return Response({"run": run.pk, "task": task_id, "status": run.status}, status=status.HTTP_202_ACCEPTED)

        return idempotent(request, handle)


class TaskCloseView(OperatorView):
    class CloseInputSerializer(serializers.Serializer):
        resolution = serializers.ChoiceField(choices=("done", "cancelled"))
        reason = serializers.CharField(max_length=500)

    @extend_schema(request=CloseInputSerializer, responses=schemas.TaskDetailOut)
    def post(self, request, task_id: int):
        get_task(request.user, task_id)
        data = self.CloseInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data

        def handle():
            controls.task_close(user=request.user, task_id=task_id, resolution=v["resolution"], reason=v["reason"])
            return _task_response(request, task_id)

        return idempotent(request, handle)


class TaskReopenView(OperatorView):
    class ReopenInputSerializer(serializers.Serializer):
        reason = serializers.CharField(max_length=500)

    @extend_schema(request=ReopenInputSerializer, responses=schemas.TaskDetailOut)
    def post(self, request, task_id: int):
        get_task(request.user, task_id)
        data = self.ReopenInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)

        def handle():
            controls.task_reopen(user=request.user, task_id=task_id, reason=data.validated_data["reason"])
            return _task_response(request, task_id)

        return idempotent(request, handle)


class TaskBudgetView(OperatorView):
    class BudgetInputSerializer(serializers.Serializer):
        limit = serializers.IntegerField(allow_null=True, min_value=0, max_value=controls.BUDGET_MAX)
        reason = serializers.CharField(max_length=500)

    @extend_schema(request=BudgetInputSerializer, responses=schemas.TaskDetailOut)
    def post(self, request, task_id: int):
        get_task(request.user, task_id)
        data = self.BudgetInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data

        def handle():
            controls.task_budget(user=request.user, task_id=task_id, limit=v["limit"], reason=v["reason"])
            return _task_response(request, task_id)

        return idempotent(request, handle)


class TaskDependenciesView(OperatorView):
    class DependenciesInputSerializer(serializers.Serializer):
        add = serializers.ListField(
            child=serializers.IntegerField(min_value=1, max_value=ID_MAX), required=False, max_length=100
        )
        remove = serializers.ListField(
            child=serializers.IntegerField(min_value=1, max_value=ID_MAX), required=False, max_length=100
        )

    @extend_schema(request=DependenciesInputSerializer, responses=schemas.TaskDetailOut)
    def post(self, request, task_id: int):
        get_task(request.user, task_id)
        data = self.DependenciesInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data

        def handle():
            controls.task_dependencies(user=request.user, task_id=task_id, add=v.get("add"), remove=v.get("remove"))
            return _task_response(request, task_id)

        return idempotent(request, handle)


class TaskStartOverView(OperatorView):
    """A fresh run from the beginning of the task's input that reuses nothing (never a recovery)."""

    class StartOverInputSerializer(serializers.Serializer):
        accept_duplicate_risk = serializers.BooleanField(required=False, default=False)

    @extend_schema(request=StartOverInputSerializer, responses={202: schemas.QueuedRunOut})
    def post(self, request, task_id: int):
        get_task(request.user, task_id)
        data = self.StartOverInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)

        def handle():
            run = start_over.task_start_over(
                task_id=task_id,
                user=request.user,
                accept_duplicate_risk=data.validated_data["accept_duplicate_risk"],
            )
            return Response(
                {"run": run.pk, "task": task_id, "continues": None, "fresh_start": True},
                status=status.HTTP_202_ACCEPTED,
            )

        return idempotent(request, handle)


class TaskContinueFromView(OperatorView):
    """Continue from step k: a new run reusing steps 1..k-1 of the latest run, running k onward fresh (never a
    recovery). `preview: true` only reads what it would reuse and run again."""

    class ContinueFromInputSerializer(serializers.Serializer):
        seq = serializers.IntegerField(min_value=-ID_MAX, max_value=ID_MAX)
        preview = serializers.BooleanField(required=False, default=False)
        accept_duplicate_risk = serializers.BooleanField(required=False, default=False)
        reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=500)

    @extend_schema(
        request=ContinueFromInputSerializer,
        responses={200: schemas.ContinueFromPreviewOut, 202: schemas.QueuedRunOut},
    )
    def post(self, request, task_id: int):
        get_task(request.user, task_id)
        data = self.ContinueFromInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        if v["preview"]:
            preview = continue_from.continue_from_preview(task_id=task_id, user=request.user, seq=v["seq"])
            return Response(preview.as_dict())

        def handle():
            run = continue_from.task_continue_from(
                task_id=task_id,
                user=request.user,
                seq=v["seq"],
                accept_duplicate_risk=v["accept_duplicate_risk"],
                reason=v["reason"],
            )
            return Response(
                {"run": run.pk, "task": task_id, "continues": None, "continued_from": run.carry["continued_from"]},
                status=status.HTTP_202_ACCEPTED,
            )

        return idempotent(request, handle)


SETTING_KINDS = ("tool_mode", "auto_resume", "unknown_outcome")


class AgentToolModeOut(serializers.Serializer):
    tool = serializers.CharField()
    default = serializers.ChoiceField(choices=RecoveryMode.choices, help_text="registered, else built in")
    mode = serializers.ChoiceField(choices=RecoveryMode.choices)
    description = serializers.CharField(
        required=False, allow_blank=True, help_text="as the agent's worker registered it (registered agents only)"
    )
    registered = serializers.BooleanField(
        required=False, help_text="in the catalogue the agent's worker registered (registered agents only)"
    )


# `from` is a Python keyword, so this one is built from a dict of its fields.
AgentSettingChangeOut = type(
    "AgentSettingChangeOut",
    (serializers.Serializer,),
    {
        "actor": serializers.CharField(),
        "at": serializers.DateTimeField(),
        "setting": serializers.ChoiceField(choices=SETTING_KINDS),
        "tool": serializers.CharField(required=False, help_text="absent for the auto-resume switch"),
        "from": serializers.JSONField(help_text="a recovery mode, a boolean for auto-resume, ask_person|tell_agent"),
        "to": serializers.JSONField(help_text="a recovery mode, a boolean for auto-resume, ask_person|tell_agent"),
        "reason": serializers.CharField(allow_blank=True),
    },
)


class AgentSettingsOut(serializers.Serializer):
    agent = serializers.CharField()
    auto_resume = serializers.BooleanField()
    unknown_outcome = serializers.ChoiceField(
        choices=UnknownOutcome.choices, help_text="who settles an unknown outcome of its agent runs"
    )
    registered = serializers.BooleanField(help_text="its worker registered a tool catalogue")
    registered_at = serializers.DateTimeField(allow_null=True)
    tools = AgentToolModeOut(many=True)
    history = AgentSettingChangeOut(many=True, help_text="newest first")


class AgentSettingsView(OperatorView):
    """An agent's recovery modes, auto-resume switch and the history of their changes (admin)."""

    @extend_schema(parameters=[OpenApiParameter("org", str)], responses=AgentSettingsOut)
    def get(self, request, name: str):
        ms = memberships_of(request.user)
        org_slug = request.query_params.get("org")
        if org_slug:
            ms = [m for m in ms if m.org.slug == org_slug]
        agents = {
            a.org_id: a
            for a in Agent.objects.filter(org_id__in=[m.org_id for m in ms], name=name).select_related("profile")
        }
        if not agents:
            raise NotFound(f"No agent {name!r}.")
        # Among the organizations that have such an agent, the one where the caller is an admin, if any.
        org_id = next((m.org_id for m in ms if m.org_id in agents and m.allows(Role.ADMIN)), next(iter(agents)))
        require_role(request.user, org_id, Role.ADMIN, what=f"No agent {name!r}.")
        agent = agents[org_id]
        history = selectors.profile_history(org_id, [agent.name], limit=10_000).get(agent.name, [])
        profile = agent.profile
        catalogue = profile.tool_catalogue
        data = {
            "agent": agent.name,
            "auto_resume": profile.auto_resume,
            "unknown_outcome": profile.unknown_outcome,
            "registered": catalogue is not None,
            "registered_at": profile.tools_registered_at,
            "tools": [
                {
                    "tool": tool,
                    "default": default_mode(tool, catalogue),
                    "mode": mode,
                    # Only an agent whose worker registered its tools has descriptions to give.
                    **(
                        {
                            "description": str((catalogue.get(tool) or {}).get("description") or ""),
                            "registered": tool in catalogue,
                        }
                        if catalogue is not None
                        else {}
                    ),
                }
                for tool, mode in current_modes(profile.tool_modes, catalogue=catalogue).items()
            ],
            "history": [entry.as_api() for entry in history],
        }
        return Response(AgentSettingsOut(data).data)


# --- workspaces (DESIGN §9) ---------------------------------------------------------------


def repair_data(repair) -> dict:
    return {
        "id": repair.pk,
        "repair": repair.repair,
        "action": repair.action_id,
        "requested_by": repair.requested_by.username if repair.requested_by else None,
        "status": repair.status,
        "result": repair.result,
        "label": repair.label or None,
        "claimed_by": repair.claimed_by or None,
        "claimed_at": repair.claimed_at.isoformat() if repair.claimed_at else None,
        "summary": plain(repair_line(repair)),
        "created_at": repair.created_at.isoformat(),
        "completed_at": repair.completed_at.isoformat() if repair.completed_at else None,
    }


class ActionRepairView(OperatorView):
    class RepairInputSerializer(VersionIn):
        repair = serializers.ChoiceField(choices=(repairs.RETRY_EXPORT, repairs.RECONCILE, repairs.REISSUE))
        # The run the confirmation was about: a confirmation for another run is stale.
        run = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=2**63 - 1)

    @extend_schema(request=RepairInputSerializer, responses={202: schemas.RepairResultOut})
    def post(self, request, action_id: int):
        get_action(request.user, action_id)
        data = self.RepairInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data

        def handle():
            repair = repairs.action_repair(
                action_id=action_id, user=request.user, version=v["version"], repair=v["repair"], run=v.get("run")
            )
            body = {**repair_data(repair), "action": action_data(get_action(request.user, action_id))}
            return Response(body, status=status.HTTP_202_ACCEPTED)

        return idempotent(request, handle)


class ActionRepairTaskView(OperatorView):
    class RepairTaskInputSerializer(serializers.Serializer):
        agent = serializers.CharField(max_length=100)
        title = serializers.CharField(required=False, allow_blank=True, default="", max_length=300)
        return_owner = serializers.CharField(required=False, allow_blank=True, default="", max_length=150)
        input = serializers.JSONField(required=False)

    @extend_schema(request=RepairTaskInputSerializer, responses={201: schemas.TaskDetailOut})
    def post(self, request, action_id: int):
        get_action(request.user, action_id)
        data = self.RepairTaskInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data

        def handle():
            task = repairs.action_repair_task(
                action_id=action_id,
                user=request.user,
                agent=v["agent"],
                title=v["title"],
                return_owner=v["return_owner"],
                input=v.get("input"),
            )
            return _task_response(request, task.pk, code=status.HTTP_201_CREATED)

        return idempotent(request, handle)


def _side(side: dict | None) -> dict | None:
    if side is None:
        return None
    return {
        k: side[k] for k in ("size", "sha256", "mtime", "kind", "link", "hashed", "not_kept", "not_kept_detail")
        if k in side
    }  # fmt: skip


def workspace_data(task, state: workspaces.WorkspaceState) -> dict:
    return {
        "path": state.path,
        # "server": the server's own directory, read now; "worker": the worker's path, as it last reported.
        "path_is": state.on,
        "report": ({**state.report, "at": state.report["at"].isoformat()} if state.report is not None else None),
        "held": False,
        "exists": state.exists,
        "hold": (
            {"action": state.hold.pk, "kind": state.hold.kind, "detail": workspaces.hold_of(state.hold).detail}
            if state.hold
            else None
        ),
        **state.bounds,
        "files": [
            {
                "path": wire(f.path),
                "status": f.status,
                **({} if f.verified else {"verified": False}),
                "recorded": _side(f.recorded),
                "actual": _side(f.actual),
                "written_by": (
                    {k: f.recorded.get(k) for k in ("run", "seq", "tool", "source")} if f.recorded else None
                ),
            }
            for f in state.files
        ],
        "held_copies": [
            {
                "id": c.pk,
                "path": c.path,
                "reason": c.reason,
                "repair": c.repair_id,
                "created_at": c.created_at.isoformat(),
                "url": f"/api/tasks/{task.pk}/workspace/?held={c.pk}",
            }
            for c in state.held_copies
        ],
        "export": (
            {
                "destination": state.export.destination,
                "ok": state.export.ok,
                "error": state.export.error or None,
                "run": state.export.run_id,
                "counts": (state.export.result or {}).get("counts"),
                "at": state.export.created_at.isoformat(),
            }
            if state.export
            else None
        ),
    }


class TaskWorkspaceView(OperatorView):
    @extend_schema(
        parameters=[OpenApiParameter("held", int, description="List a held copy of the workspace instead.")],
        responses=schemas.WorkspaceOut,
    )
    def get(self, request, task_id: int):
        task = get_task(request.user, task_id)
        held = request.query_params.get("held")
        if held not in (None, ""):
            if not held.isdigit() or len(held) > 18:
                raise Invalid("`held` must be the id of a held copy.", field="held")
            copy = workspaces.HeldCopy.objects.filter(task=task, pk=int(held)).first()
            if copy is None:
                raise NotFound(f"No held copy #{held} of task #{task_id}.")
            files = workspaces.held_listing(copy)
            return Response(
                {
                    "path": copy.path,
                    "path_is": "worker" if task.workspace_label else "server",
                    "held": True,
                    "reason": copy.reason,
                    "kept": copy.files,
                    "files": [{"path": wire(f.path), "status": f.status, "actual": _side(f.actual)} for f in files],
                }
            )
        return Response(workspace_data(task, workspaces.workspace_state(task)))
