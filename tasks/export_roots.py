"""Export roots (DESIGN §9): the directories an organization's tasks may export under, and nowhere else.

Two levels confine every export:

- the deployment's export area, `CONSOLE_EXPORTS` (default `var/exports`): set by whoever runs the server;
  nothing outside it is ever an export root;
- each organization's export roots, added and removed by its admins (Settings → Export roots, or
  `/api/export-roots/`). An organization has none until an admin adds one, so by default no task exports at all.
  A root lies inside the export area, passes through no symbolic link, and neither contains nor lies inside
  another organization's root.

A task's `export_destination` is checked when the task is created (400 `invalid`, `reason` saying which rule) and
again by the supervisor right before it copies (`destination_refusal(..., exporting=True)`): a root removed since,
a root now outside the export area, a destination that is (also) under another organization's root, or a path
that now passes through a link refuses the export, which opens the usual `workspace_export` action saying why.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings
from django.db import connection, transaction

from tasks.authz import require_role
from tasks.errors import Invalid, NotFound
from tasks.events import actor_name, event_append
from tasks.models import ExportRoot, Organization, Role
from tasks.workspace import URL_RE, destination_problem

# Any constant: the advisory lock that serializes root additions across organizations on PostgreSQL (SQLite's
# IMMEDIATE transactions serialize every writer anyway), so two admins cannot add overlapping roots at once.
_ROOTS_LOCK = 0x6578_706F_7274


def export_area() -> list[str]:
    """The deployment's export area, as real paths."""
    return [os.path.realpath(p) for p in settings.CONSOLE_EXPORTS]


def _inside(path: str, parent: str) -> bool:
    """`path` is `parent` or lies beneath it (both absolute and normalized)."""
    return os.path.commonpath([path, parent]) == parent


def _normalized(path) -> str | None:
    if not isinstance(path, str) or not path.strip() or "\x00" in path or not os.path.isabs(path):
        return None
    if any(part == ".." for part in path.split("/")):
        return None
    return os.path.normpath(path)


def _area_text() -> str:
    return " or ".join(export_area())


def _server_ground(norm: str) -> str | None:
    """Why `norm` would let an export write over the server's own ground (workspaces, its code), or None."""
    workspaces = os.path.realpath(settings.CONSOLE_WORKSPACES)
    code = os.path.realpath(settings.BASE_DIR)
    var = os.path.realpath(settings.VAR_DIR)
    if _inside(workspaces, norm):
        return f"{norm} contains the task workspaces; an export there could write into any task's files."
    if _inside(code, norm) or (_inside(norm, code) and not _inside(norm, var)):
        return f"{norm} holds the console's own code; an export there could change the application."
    return None


def root_problem(org_id: int, path) -> tuple[str, str] | None:
    """(reason, sentence) if `path` cannot become an export root of the organization, else None."""
    norm = _normalized(path)
    if norm is None or URL_RE.match(str(path)):
        return "not_absolute", f"An export root is an absolute directory path without '..', not {str(path)[:200]!r}."
    if problem := destination_problem(norm):
        return "unsafe_path", problem.replace("export destination", "export root")
    if problem := _server_ground(norm):
        return "server_ground", problem
    if not any(_inside(norm, area) for area in export_area()):
        return (
            "outside_export_area",
            f"{norm} is outside this server's export area ({_area_text()}); export roots must lie inside it. "
            "Whoever runs the server sets the area (CONSOLE_EXPORTS).",
        )
    for other in ExportRoot.objects.exclude(org_id=org_id).only("path"):
        if _inside(norm, other.path) or _inside(other.path, norm):
            return "other_organization_root", f"{norm} overlaps an export root of another organization."
    if ExportRoot.objects.filter(org_id=org_id, path=norm).exists():
        return "duplicate", f"{norm} is already an export root of this organization."
    if ExportRoot.objects.filter(org_id=org_id).count() >= settings.CONSOLE_EXPORT_ROOTS_MAX:
        return "too_many", f"An organization has at most {settings.CONSOLE_EXPORT_ROOTS_MAX} export roots."
    return None


def destination_refusal(org_id: int, dest, *, exporting: bool) -> tuple[str, str] | None:
    """(reason, sentence) if the organization's tasks may not export to `dest`, else None.

    At creation (`exporting=False`) a URL may be saved: it never writes anything here, and exporting it fails
    and says so. At export time every rule is checked against the roots and the area as they are now.
    """
    if isinstance(dest, str) and URL_RE.match(dest) and not exporting:
        return None
    if problem := destination_problem(dest, exporting=exporting):
        return "unsafe_destination", problem
    norm = os.path.normpath(dest)
    roots = [r for r in ExportRoot.objects.filter(org_id=org_id).values_list("path", flat=True) if _inside(norm, r)]
    if not roots:
        org = Organization.objects.filter(pk=org_id).values_list("name", flat=True).first() or "this organization"
        return (
            "outside_export_roots",
            f"{norm} is not under an export root of {org}, so nothing may be exported there. An admin of {org} "
            "adds export roots on Settings → Export roots.",
        )
    if exporting:
        if problem := _server_ground(norm):
            return "server_ground", problem
        area = export_area()
        if not any(_inside(root, a) for root in roots for a in area):
            return (
                "outside_export_area",
                f"The export root of {norm} is no longer inside this server's export area ({_area_text()}).",
            )
        for other in ExportRoot.objects.exclude(org_id=org_id).values_list("path", flat=True):
            if _inside(norm, other) or _inside(other, norm):
                return "other_organization_root", f"{norm} overlaps an export root of another organization."
    return None


@transaction.atomic
def export_root_add(*, actor, org_id: int, path: str, reason: str = "") -> ExportRoot:
    """An admin adds an export root to their organization. Refused (400 `invalid`, with `reason`) by root_problem;
    the directory is created if it does not exist yet (inside the export area only)."""
    require_role(actor, org_id, Role.ADMIN)
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", [_ROOTS_LOCK])
    if problem := root_problem(org_id, path):
        raise Invalid(problem[1], field="path", reason=problem[0])
    norm = os.path.normpath(path)
    Path(norm).mkdir(parents=True, exist_ok=True)
    root = ExportRoot.objects.create(org_id=org_id, path=norm, added_by=actor_name(actor), reason=reason[:500])
    event_append(org_id=org_id, kind="export_root_added", actor=actor, payload={"path": norm, "reason": root.reason})
    return root


@transaction.atomic
def export_root_remove(*, actor, org_id: int, root_id: int, reason: str = "") -> str:
    """An admin removes an export root; tasks exporting under it are refused from the next export on."""
    require_role(actor, org_id, Role.ADMIN)
    root = ExportRoot.objects.select_for_update().filter(org_id=org_id, pk=root_id).first()
    if root is None:
        raise NotFound("No such export root.")
    root.delete()
    event_append(org_id=org_id, kind="export_root_removed", actor=actor, payload={"path": root.path, "reason": reason})
    return root.path


def export_roots(org_id: int) -> list[ExportRoot]:
    return list(ExportRoot.objects.filter(org_id=org_id).order_by("path"))
