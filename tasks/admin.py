"""Django admin: read-mostly. State fields are changed by services, never by hand here."""

from django.contrib import admin

from tasks import models


class ReadMostly(admin.ModelAdmin):
    """Everything read-only except the fields named in `editable`."""

    editable: tuple[str, ...] = ()

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ()
        return [f.name for f in self.model._meta.fields if f.name not in self.editable]

    def has_add_permission(self, request):
        return bool(self.editable) and super().has_add_permission(request)

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(models.Organization)
class OrganizationAdmin(ReadMostly):
    list_display = ("slug", "name", "created_at")
    editable = ("name",)


@admin.register(models.Membership)
class MembershipAdmin(ReadMostly):
    list_display = ("user", "org", "role")
    list_filter = ("org", "role")
    editable = ("role",)


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
    editable = ("title",)


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
