"""Saved views: a person's named board filters (save, replace, delete; at most MAX_VIEWS each)."""

from collections.abc import Mapping

from django.db import transaction
from django.utils import timezone

from recovery.models import SavedView
from recovery.triage.filters import BoardFilter, text_ok
from tasks.authz import require_role
from tasks.errors import Invalid, NotFound
from tasks.models import Role

MAX_VIEWS = 50
MAX_VIEW_NAME = 80


def saved_views(user, org_id: int) -> list[SavedView]:
    return list(SavedView.objects.filter(user=user, org_id=org_id).order_by("name", "id")[:MAX_VIEWS])


@transaction.atomic
def view_save(*, user, org_id: int, name: str, params: Mapping) -> SavedView:
    """Save the board's current filter under a name, for this person only; the same name is replaced.

    Any member may (a view only changes what its owner's board lists). Values the
    board does not know are dropped, as the board drops them.
    """
    require_role(user, org_id, Role.VIEWER)
    name = " ".join(name.split()) if isinstance(name, str) else ""
    if not name:
        raise Invalid("Give the view a name.", field="name")
    if len(name) > MAX_VIEW_NAME or not text_ok(name):
        raise Invalid(f"A view's name holds at most {MAX_VIEW_NAME} characters.", field="name")
    values = BoardFilter.parse(params if isinstance(params, Mapping) else {}).params()
    existing = SavedView.objects.select_for_update().filter(user=user, org_id=org_id, name=name).first()
    if existing is not None:
        SavedView.objects.filter(pk=existing.pk).update(params=values, updated_at=timezone.now())
        existing.refresh_from_db()
        return existing
    if SavedView.objects.filter(user=user, org_id=org_id).count() >= MAX_VIEWS:
        raise Invalid(f"You have {MAX_VIEWS} saved views, the most one person may: delete one first.", field="name")
    return SavedView.objects.create(user=user, org_id=org_id, name=name, params=values)


@transaction.atomic
def view_delete(*, user, view_id: int) -> None:
    """Delete one of the person's own views; anyone else's is 404, like one that does not exist."""
    deleted, _ = SavedView.objects.filter(pk=view_id, user=user).delete()
    if not deleted:
        raise NotFound(f"No saved view #{view_id}.")
