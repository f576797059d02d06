"""Fewer indexes on the hot tables (issue 27): every checkpoint writes a step and an event, and every index on them
is one more entry per write. The foreign keys' own single-column indexes go where a composite index already leads
with the column (step.run_id: step_one_per_run_seq; event.org_id: event_org_id; event.task_id: event_task_id) or
no query reads by it (event.run_id); step.parent_id and step.reused_from_id, only needed by a deletion's cascade,
become partial (non-null rows only). The foreign key constraints stay as they are: only the indexes are dropped
(an AlterField would drop and re-validate each constraint).
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tasks', '0017_org_recovery_settings'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='event',
                    name='org',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='events', to='tasks.organization'),
                ),
                migrations.AlterField(
                    model_name='event',
                    name='run',
                    field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='events', to='tasks.run'),
                ),
                migrations.AlterField(
                    model_name='event',
                    name='task',
                    field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='events', to='tasks.task'),
                ),
                migrations.AlterField(
                    model_name='step',
                    name='parent',
                    field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='children', to='tasks.step'),
                ),
                migrations.AlterField(
                    model_name='step',
                    name='reused_from',
                    field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='reused_by', to='tasks.step'),
                ),
                migrations.AlterField(
                    model_name='step',
                    name='run',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='steps', to='tasks.run'),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    'DROP INDEX IF EXISTS "tasks_event_org_id_78e67b26"',
                    reverse_sql='CREATE INDEX "tasks_event_org_id_78e67b26" ON "tasks_event" ("org_id")',
                ),
                migrations.RunSQL(
                    'DROP INDEX IF EXISTS "tasks_event_run_id_7c278b58"',
                    reverse_sql='CREATE INDEX "tasks_event_run_id_7c278b58" ON "tasks_event" ("run_id")',
                ),
                migrations.RunSQL(
                    'DROP INDEX IF EXISTS "tasks_event_task_id_9f848980"',
                    reverse_sql='CREATE INDEX "tasks_event_task_id_9f848980" ON "tasks_event" ("task_id")',
                ),
                migrations.RunSQL(
                    'DROP INDEX IF EXISTS "tasks_step_parent_id_de070e3e"',
                    reverse_sql='CREATE INDEX "tasks_step_parent_id_de070e3e" ON "tasks_step" ("parent_id")',
                ),
                migrations.RunSQL(
                    'DROP INDEX IF EXISTS "tasks_step_reused_from_id_aab1c7fe"',
                    reverse_sql='CREATE INDEX "tasks_step_reused_from_id_aab1c7fe" ON "tasks_step" ("reused_from_id")',
                ),
                migrations.RunSQL(
                    'DROP INDEX IF EXISTS "tasks_step_run_id_8c8c9564"',
                    reverse_sql='CREATE INDEX "tasks_step_run_id_8c8c9564" ON "tasks_step" ("run_id")',
                ),
            ],
        ),
        migrations.AddIndex(
            model_name='step',
            index=models.Index(condition=models.Q(('parent__isnull', False)), fields=['parent'], name='step_parent_set'),
        ),
        migrations.AddIndex(
            model_name='step',
            index=models.Index(condition=models.Q(('reused_from__isnull', False)), fields=['reused_from'], name='step_reused_from_set'),
        ),
    ]
