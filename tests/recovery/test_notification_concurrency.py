"""Supervisors delivering at the same moment send each notice once (PostgreSQL: SKIP LOCKED, then a
compare-and-set on the delivery's attempts)."""

import pytest
from django.db import connection, transaction

from recovery import notify
from recovery.models import NotificationDelivery
from tasks.events import event_append
from tests.recovery.races import race
from tests.recovery.receivers import start_receiver


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_four_supervisors_at_once_send_each_notice_once(org, admin_user):
    if connection.vendor != "postgresql":
        pytest.skip("SQLite has a single writer at a time: there is no row lock to skip")
    receiver, stop = start_receiver()
    try:
        notify.destination_add(actor=admin_user, org_id=org.pk, kind="webhook", url=receiver.url, events=["exhausted"])
        for n in range(12):
            with transaction.atomic():
                event_append(org_id=org.pk, kind="action_exhausted", actor="t", payload={"action": n, "status": "x"})
        done = race([lambda: notify.deliveries_run(batch=3) for _ in range(4)])
    finally:
        stop()

    assert sum(d.get("delivered", 0) for d in done) == 12
    ids = [r.headers["webhook-id"] for r in receiver.got]
    assert len(ids) == 12 and len(set(ids)) == 12  # each notice once, none twice
    assert set(NotificationDelivery.objects.values_list("status", "attempts")) == {("delivered", 1)}
