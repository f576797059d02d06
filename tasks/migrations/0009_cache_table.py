from django.core.management import call_command
from django.db import migrations


def create_cache_table(apps, schema_editor):
    # The database cache (settings.CACHES) holds the rate-limit counts; `migrate` makes its table, so no
    # deployment needs a separate `createcachetable` step. It skips a table that exists.
    call_command("createcachetable", database=schema_editor.connection.alias, verbosity=0)


class Migration(migrations.Migration):
    dependencies = [("tasks", "0008_wide_integers_for_growing_sums")]

    operations = [migrations.RunPython(create_cache_table, migrations.RunPython.noop, elidable=False)]
