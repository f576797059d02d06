from django.contrib import admin

from recovery import models
from tasks.admin import ReadMostly


@admin.register(models.RecoveryAction)
class RecoveryActionAdmin(ReadMostly):
    list_display = ("id", "task", "run", "kind", "status", "cause", "attempts", "max_attempts", "version")
    list_filter = ("kind", "status")


@admin.register(models.RecoveryAttempt)
class RecoveryAttemptAdmin(ReadMostly):
    list_display = ("action", "number", "requested_by", "acknowledged_at", "continuation_run", "outcome")


@admin.register(models.Repair)
class RepairAdmin(ReadMostly):
    list_display = ("action", "repair", "requested_by", "status", "created_at")
