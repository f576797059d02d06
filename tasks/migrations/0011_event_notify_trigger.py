from django.db import migrations

# On PostgreSQL appending an event wakes the web processes' relays: a trigger NOTIFYs, and PostgreSQL
# folds identical notifications of one transaction into one, delivered on commit. So a service pays no
# round trip of its own for the wake-up, and a transaction sends one. A claim's `run_claimed` does not
# notify: a notifying commit takes a lock that serializes every other notifying commit, which would
# make concurrent claimers wait for each other; the claimed run's next write (its first step, its
# finish) wakes the relays within moments, and the relays' poll takes the claim regardless.
CREATE = """
CREATE FUNCTION console_events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('console_events', '');
    RETURN NULL;
END
$$;
CREATE TRIGGER console_events_notify AFTER INSERT ON tasks_event
    FOR EACH ROW WHEN (NEW.kind <> 'run_claimed') EXECUTE FUNCTION console_events_notify();
"""
DROP = """
DROP TRIGGER IF EXISTS console_events_notify ON tasks_event;
DROP FUNCTION IF EXISTS console_events_notify();
"""


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("tasks", "0010_run_queue_place")]

    operations = [migrations.RunPython(create, drop)]
