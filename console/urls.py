from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularJSONAPIView

from console.ops_api import HealthView, WorkersView, healthz, metrics_view
from console.views import breakers, continue_from, limits, notifications
from console.views.accounts import LoginView, logout, password_change, password_change_done
from console.views.bulk import bulk_cancel, bulk_detail, bulk_execute, bulk_history, bulk_preview, bulk_retry_failed
from console.views.ops import workers_page
from console.views.refusals import bad_request, forbidden, not_found
from console.views.settings_pages import (
    settings_agent,
    settings_exports,
    settings_exports_remove,
    settings_signin,
    settings_signin_unlock,
    settings_tools,
)
from console.views.task_pages import (
    action_cancel,
    action_decide,
    action_repair,
    action_repair_task,
    action_retry,
    run_stop,
    run_view,
    task_budget,
    task_close,
    task_continue,
    task_dependencies,
    task_message,
    task_messages_deliver,
    task_owner,
    task_pause,
    task_reopen,
    task_resume,
    task_start_over,
    task_view,
    task_workspace,
)
from console.views.triage import board, inbox, view_delete, view_save
from recovery.api import breakers as breakers_api
from recovery.api import notifications as notifications_api
from recovery.api import runner as runner_api
from recovery.api import runner_repairs
from recovery.api import views as recovery_api
from recovery.bulk import api as bulk_api
from tasks import api as tasks_api

api = [
    path("tasks/", recovery_api.TaskListView.as_view(), name="api-tasks"),
    path("tasks/<int:task_id>/", recovery_api.TaskDetailView.as_view(), name="api-task"),
    path("runs/<int:run_id>/", recovery_api.RunDetailView.as_view(), name="api-run"),
    path("runs/<int:run_id>/stop/", recovery_api.RunStopView.as_view(), name="api-run-stop"),
    path("tasks/<int:task_id>/pause/", recovery_api.TaskPauseView.as_view(), name="api-task-pause"),
    path("tasks/<int:task_id>/resume-task/", recovery_api.TaskResumeView.as_view(), name="api-task-resume"),
    path("tasks/<int:task_id>/messages/", recovery_api.TaskMessagesView.as_view(), name="api-task-messages"),
    path(
        "tasks/<int:task_id>/messages/deliver/",
        recovery_api.TaskMessagesDeliverView.as_view(),
        name="api-task-messages-deliver",
    ),
    path("tasks/<int:task_id>/owner/", recovery_api.TaskOwnerView.as_view(), name="api-task-owner"),
    path("tasks/<int:task_id>/continue/", recovery_api.TaskContinueView.as_view(), name="api-task-continue"),
    path("tasks/<int:task_id>/close/", recovery_api.TaskCloseView.as_view(), name="api-task-close"),
    path("tasks/<int:task_id>/reopen/", recovery_api.TaskReopenView.as_view(), name="api-task-reopen"),
    path("tasks/<int:task_id>/budget/", recovery_api.TaskBudgetView.as_view(), name="api-task-budget"),
    path(
        "tasks/<int:task_id>/dependencies/",
        recovery_api.TaskDependenciesView.as_view(),
        name="api-task-dependencies",
    ),
    path("tasks/<int:task_id>/start-over/", recovery_api.TaskStartOverView.as_view(), name="api-task-start-over"),
    path(
        "tasks/<int:task_id>/continue-from/",
        recovery_api.TaskContinueFromView.as_view(),
        name="api-task-continue-from",
    ),
    path("actions/<int:action_id>/", recovery_api.ActionDetailView.as_view(), name="api-action"),
    path("actions/<int:action_id>/retry/", recovery_api.ActionRetryView.as_view(), name="api-action-retry"),
    path("actions/<int:action_id>/decision/", recovery_api.ActionDecisionView.as_view(), name="api-action-decision"),
    path("actions/<int:action_id>/cancel/", recovery_api.ActionCancelView.as_view(), name="api-action-cancel"),
    path("actions/<int:action_id>/repair/", recovery_api.ActionRepairView.as_view(), name="api-action-repair"),
    path(
        "actions/<int:action_id>/repair-task/",
        recovery_api.ActionRepairTaskView.as_view(),
        name="api-action-repair-task",
    ),
    path("tasks/<int:task_id>/workspace/", recovery_api.TaskWorkspaceView.as_view(), name="api-task-workspace"),
    path("events/", tasks_api.EventListView.as_view(), name="api-events"),
    path("export-roots/", tasks_api.ExportRootListView.as_view(), name="api-export-roots"),
    path("export-roots/<int:root_id>/", tasks_api.ExportRootDetailView.as_view(), name="api-export-root"),
    path("agents/<str:name>/settings/", recovery_api.AgentSettingsView.as_view(), name="api-agent-settings"),
    path(
        "notifications/destinations/", notifications_api.DestinationListView.as_view(), name="api-notify-destinations"
    ),
    path("notifications/deliveries/", notifications_api.DeliveryListView.as_view(), name="api-notify-deliveries"),
    path("runner/claim/", tasks_api.ClaimView.as_view(), name="runner-claim"),
    path("runner/runs/<int:run_id>/workspace/", runner_api.WorkspaceReportView.as_view(), name="runner-workspace"),
    path("runner/exports/claim/", runner_api.ExportClaimView.as_view(), name="runner-export-claim"),
    path("runner/exports/<int:export_id>/result/", runner_api.ExportResultView.as_view(), name="runner-export-result"),
    path("runner/runs/<int:run_id>/heartbeat/", tasks_api.HeartbeatView.as_view(), name="runner-heartbeat"),
    path("runner/runs/<int:run_id>/steps/", tasks_api.StepPlanView.as_view(), name="runner-step-plan"),
    path(
        "runner/runs/<int:run_id>/steps/<int:seq>/dispatch/",
        tasks_api.StepDispatchView.as_view(),
        name="runner-step-dispatch",
    ),
    path(
        "runner/runs/<int:run_id>/steps/<int:seq>/complete/",
        tasks_api.StepCompleteView.as_view(),
        name="runner-step-complete",
    ),
    path("runner/runs/<int:run_id>/finish/", tasks_api.FinishView.as_view(), name="runner-finish"),
    path("runner/runs/<int:run_id>/tasks/", tasks_api.ChildTaskView.as_view(), name="runner-child-task"),
    path("runner/agents/<str:name>/tools/", tasks_api.AgentToolsView.as_view(), name="runner-agent-tools"),
    path("runner/runs/<int:run_id>/messages/ack/", tasks_api.MessagesAckView.as_view(), name="runner-messages-ack"),
    path("runner/repairs/claim/", runner_repairs.RepairClaimView.as_view(), name="runner-repair-claim"),
    path(
        "runner/repairs/<int:repair_id>/result/",
        runner_repairs.RepairResultView.as_view(),
        name="runner-repair-result",
    ),
    path("bulk/", bulk_api.BulkListView.as_view(), name="api-bulk"),
    path("bulk/<int:op_id>/", bulk_api.BulkDetailView.as_view(), name="api-bulk-detail"),
    path("bulk/<int:op_id>/execute/", bulk_api.BulkExecuteView.as_view(), name="api-bulk-execute"),
    path("bulk/<int:op_id>/cancel/", bulk_api.BulkCancelView.as_view(), name="api-bulk-cancel"),
    path("bulk/<int:op_id>/retry-failed/", bulk_api.BulkRetryFailedView.as_view(), name="api-bulk-retry-failed"),
    path("breakers/", breakers_api.BreakerListView.as_view(), name="api-breakers"),
    path("breakers/<int:breaker_id>/close/", breakers_api.BreakerCloseView.as_view(), name="api-breaker-close"),
    path("workers/", WorkersView.as_view(), name="api-workers"),
    path("health/", HealthView.as_view(), name="api-health"),
    path("schema/", SpectacularJSONAPIView.as_view(), name="api-schema"),
]

urlpatterns = [
    path("", board, name="board"),
    path("inbox/", inbox, name="inbox"),
    path("views/", view_save, name="view-save"),
    path("views/<int:view_id>/delete/", view_delete, name="view-delete"),
    path("bulk/", bulk_history, name="bulk"),
    path("bulk/preview/", bulk_preview, name="bulk-preview"),
    path("bulk/<int:op_id>/", bulk_detail, name="bulk-detail"),
    path("bulk/<int:op_id>/execute/", bulk_execute, name="bulk-execute"),
    path("bulk/<int:op_id>/cancel/", bulk_cancel, name="bulk-cancel"),
    path("bulk/<int:op_id>/retry-failed/", bulk_retry_failed, name="bulk-retry-failed"),
    path("tasks/<int:task_id>/", task_view, name="task"),
    path("tasks/<int:task_id>/pause/", task_pause, name="task-pause"),
    path("tasks/<int:task_id>/resume/", task_resume, name="task-resume"),
    path("tasks/<int:task_id>/messages/", task_message, name="task-message"),
    path("tasks/<int:task_id>/messages/deliver/", task_messages_deliver, name="task-messages-deliver"),
    path("tasks/<int:task_id>/continue/", task_continue, name="task-continue"),
    path("tasks/<int:task_id>/owner/", task_owner, name="task-owner"),
    path("tasks/<int:task_id>/close/", task_close, name="task-close"),
    path("tasks/<int:task_id>/reopen/", task_reopen, name="task-reopen"),
    path("tasks/<int:task_id>/budget/", task_budget, name="task-budget"),
    path("tasks/<int:task_id>/dependencies/", task_dependencies, name="task-dependencies"),
    path("tasks/<int:task_id>/start-over/", task_start_over, name="task-start-over"),
    path("tasks/<int:task_id>/continue-from/", continue_from.task_continue_from_page, name="task-continue-from"),
    path("runs/<int:run_id>/stop/", run_stop, name="run-stop"),
    path("agents/<str:agent>/runs/<int:run_id>/", run_view, name="run"),
    path("actions/<int:action_id>/retry/", action_retry, name="action-retry"),
    path("actions/<int:action_id>/decision/", action_decide, name="action-decide"),
    path("actions/<int:action_id>/cancel/", action_cancel, name="action-cancel"),
    path("actions/<int:action_id>/repair/", action_repair, name="action-repair"),
    path("actions/<int:action_id>/repair-task/", action_repair_task, name="action-repair-task"),
    path("tasks/<int:task_id>/workspace/", task_workspace, name="task-workspace"),
    path("settings/tools/", settings_tools, name="settings-tools"),
    path("settings/sign-in/", settings_signin, name="settings-signin"),
    path("settings/sign-in/unlock/", settings_signin_unlock, name="settings-signin-unlock"),
    path("settings/tools/<str:agent>/", settings_agent, name="settings-agent"),
    path("settings/exports/", settings_exports, name="settings-exports"),
    path("settings/notifications/", notifications.settings_notifications, name="settings-notifications"),
    path("settings/recovery/", limits.settings_recovery, name="settings-recovery"),
    path(
        "settings/notifications/<int:destination_id>/enable/",
        notifications.settings_notifications_enable,
        name="settings-notifications-enable",
    ),
    path(
        "settings/notifications/<int:destination_id>/remove/",
        notifications.settings_notifications_remove,
        name="settings-notifications-remove",
    ),
    path("settings/exports/<int:root_id>/remove/", settings_exports_remove, name="settings-exports-remove"),
    path("breakers/", breakers.breaker_list, name="breakers"),
    path("breakers/<int:breaker_id>/", breakers.breaker_detail, name="breaker"),
    path("breakers/<int:breaker_id>/close/", breakers.breaker_close, name="breaker-close"),
    path("workers/", workers_page, name="workers"),
    path("healthz", healthz, name="healthz"),
    path("metrics", metrics_view, name="metrics"),
    # Sign-in (throttled by django-axes), sign-out and password change; no password reset (no mail is sent).
    path("accounts/login/", LoginView.as_view(), name="login"),
    path("accounts/logout/", logout, name="logout"),
    path("accounts/password_change/", password_change, name="password_change"),
    path("accounts/password_change/done/", password_change_done, name="password_change_done"),
    path("admin/", admin.site.urls),
    path("api/", include(api)),
]

handler400 = bad_request
handler403 = forbidden
handler404 = not_found
handler500 = "console.middleware.server_error"
