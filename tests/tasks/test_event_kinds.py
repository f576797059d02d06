"""Event kinds are one registry (tasks/event_kinds.py): nothing appends, groups or names a kind outside it."""

import pytest
from django.db import transaction

from console.live import relay, snapshots, updates
from tasks.event_kinds import KINDS
from tasks.events import event_append
from tasks.models import Event


def test_an_unregistered_kind_is_refused_and_nothing_is_written(org):
    before = Event.objects.count()
    with pytest.raises(ValueError, match="not registered"), transaction.atomic():
        event_append(org_id=org.pk, kind="run_teleported", actor="system")
    assert Event.objects.count() == before


def test_the_live_pages_group_only_registered_kinds():
    groups = {
        name: set(value)
        for module in (snapshots, updates, relay)
        for name, value in vars(module).items()
        if name.endswith("_EVENTS") and isinstance(value, frozenset | tuple | set)
    }
    assert groups, "the live pages' groups of kinds were not found"
    unknown = {name: kinds - KINDS.keys() for name, kinds in groups.items() if kinds - KINDS.keys()}
    assert unknown == {}
