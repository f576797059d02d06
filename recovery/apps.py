from django.apps import AppConfig


class RecoveryConfig(AppConfig):
    name = "recovery"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from recovery import notify
        from recovery.actions import settle

        settle.register()
        notify.register()
