"""Django admin: read-only, except a member's role, which is changed through its service.

Every change a person makes must append its event (live sockets re-check
access on `member_set`), so nothing is added, deleted or edited here by hand:
organizations, members, agents and tokens are made with the management
commands (API.md), and state changes with the console's controls.
"""

from django.contrib import admin

from tasks import accounts, models


class ReadMostly(admin.ModelAdmin):
    """Everything read-only except the fields named in `editable` (each saved through a service)."""

    editable: tuple[str, ...] = ()

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields if f.name not in self.editable]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return bool(self.editable) and super().has_change_permission(request, obj)


@admin.register(models.Organization)
class OrganizationAdmin(ReadMostly):
    list_display = ("slug", "name", "created_at")


@admin.register(models.Membership)
class MembershipAdmin(ReadMostly):
    list_display = ("user", "org", "role")
    list_filter = ("org", "role")
    editable = ("role",)

    def save_model(self, request, obj, form, change):
        # Through the service, so the change appends `member_set` and open sockets re-check access at once.
        accounts.member_add(org=obj.org, username=obj.user.username, role=obj.role, actor=request.user)


@admin.register(models.Agent)
class AgentAdmin(ReadMostly):
    list_display = ("name", "org", "created_at")
    list_filter = ("org",)


@admin.register(models.AgentProfile)
class AgentProfileAdmin(ReadMostly):
    list_display = ("agent", "auto_resume", "updated_at")


@admin.register(models.Worker)
class WorkerAdmin(ReadMostly):
    list_display = ("name", "org", "created_at")


@admin.register(models.ApiToken)
class ApiTokenAdmin(ReadMostly):
    list_display = ("id", "user", "worker", "created_at")
    exclude = ("digest",)


@admin.register(models.Task)
class TaskAdmin(ReadMostly):
    list_display = ("id", "title", "org", "agent", "status", "paused", "budget_used", "budget_limit", "updated_at")
    list_filter = ("org", "status", "paused")
    search_fields = ("title",)


@admin.register(models.Run)
class RunAdmin(ReadMostly):
    list_display = ("id", "task", "agent", "attempt", "status", "lease_owner", "lease_epoch", "lease_expires_at")
    list_filter = ("status",)
    raw_id_fields = ("task", "continues")


@admin.register(models.Step)
class StepAdmin(ReadMostly):
    list_display = ("run", "seq", "parent_seq", "tool", "phase", "recovery_mode", "dispatched_at", "completed_at")
    list_filter = ("phase", "recovery_mode")
    raw_id_fields = ("run",)


@admin.register(models.Message)
class MessageAdmin(ReadMostly):
    list_display = ("id", "task", "author", "status", "run", "created_at")


@admin.register(models.Event)
class EventAdmin(ReadMostly):
    list_display = ("id", "kind", "org", "task", "run", "actor", "created_at")
    list_filter = ("kind",)


@admin.register(models.IdempotencyRecord)
class IdempotencyRecordAdmin(ReadMostly):
    list_display = ("principal", "key", "status_code", "created_at")
