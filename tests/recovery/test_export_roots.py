"""Export destinations are confined to the organization's own ground (issue 21, item 1).

An operator could set a task's `export_destination` to any absolute path, and after the run the supervisor
replaced another organization's export file, or wrote into the application's own package. Now an organization's
tasks export only under the export roots its admins added, inside the server's export area (`CONSOLE_EXPORTS`),
checked when the task is created and again right before every export.
"""

from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.test import Client

from recovery.models import Export, RecoveryAction
from recovery.supervisor.loop import supervise_once
from tasks.models import ExportRoot, Task
from tests.factories import make_member, user_token
from tests.recovery import engine as e
from tests.recovery.workdisk import finish_all

W = "file_write"


@pytest.fixture
def area(settings, tmp_path):
    """The server's export area for this test."""
    path = tmp_path / "exports"
    path.mkdir()
    settings.CONSOLE_EXPORTS = [path]
    return path


def create(api, dest):
    body = {"title": "t", "agent": "builder", "input": {"steps": []}, "export_destination": str(dest)}
    return api.post("/api/tasks/", body, format="json")


def test_with_no_export_root_a_task_exports_nowhere(org, agent, api, area, other_org):
    """The red team's destinations: another organization's export file, the console's own package, the area."""
    theirs = area / "globex"
    theirs.mkdir()
    ExportRoot.objects.create(org=other_org, path=str(theirs), added_by="gina")
    code = Path(django_settings.BASE_DIR) / "recovery"
    for dest in (theirs / "report", code, area / "acme", "/etc/cron.d"):
        r = create(api, dest)
        assert r.status_code == 400, (dest, r.content)
        body = r.json()
        assert body["code"] == "invalid" and body["field"] == "export_destination", body
        assert body["reason"] == "outside_export_roots", body
        assert "not under an export root of" in body["detail"] and "Settings → Export roots" in body["detail"]
    assert not Task.objects.exists()


def test_an_admin_adds_a_root_and_only_tasks_under_it_may_export(org, agent, api, admin_user, area):
    admin = Client()
    admin.force_login(admin_user)
    page = admin.get("/settings/exports/").content.decode()
    assert "has no export root: no task of it may export" in page and str(area) in page
    r = admin.post("/settings/exports/", {"path": str(area / "acme"), "reason": "release bundles"})
    assert r.status_code == 302
    page = admin.get("/settings/exports/").content.decode()
    assert f"Added {area / 'acme'}: tasks may now export under it." in page and "release bundles" in page
    assert (area / "acme").is_dir()
    assert create(api, area / "acme" / "site").status_code == 201
    assert create(api, area / "acme").status_code == 201
    refused = create(api, area / "acmeish")  # a sibling whose name starts alike is not under the root
    assert refused.status_code == 400 and refused.json()["reason"] == "outside_export_roots"


@pytest.mark.parametrize(
    "where, reason",
    [
        ("outside", "outside_export_area"),
        ("theirs", "other_organization_root"),
        ("inside-theirs", "other_organization_root"),
        ("around-theirs", "other_organization_root"),
        ("workspaces", "server_ground"),
        ("link", "unsafe_path"),
        ("relative", "not_absolute"),
        ("dotdot", "not_absolute"),
    ],
)
def test_a_root_outside_the_area_or_over_another_organization_is_refused(
    org, other_org, admin_user, area, tmp_path, settings, where, reason
):
    theirs = area / "shared" / "globex"
    theirs.mkdir(parents=True)
    ExportRoot.objects.create(org=other_org, path=str(theirs), added_by="gina")
    (area / "via").symlink_to(tmp_path)
    settings.CONSOLE_WORKSPACES = area / "ws"
    path = {
        "outside": str(tmp_path / "elsewhere"),
        "theirs": str(theirs),
        "inside-theirs": str(theirs / "sub"),
        "around-theirs": str(area / "shared"),
        "workspaces": str(area),
        "link": str(area / "via" / "x"),
        "relative": "exports/acme",
        "dotdot": f"{area}/../x",
    }[where]
    api = Client()
    api.force_login(admin_user)
    r = api.post("/api/export-roots/", {"path": path}, content_type="application/json")
    assert r.status_code == 400, r.content
    assert r.json()["reason"] == reason, r.json()
    assert not ExportRoot.objects.filter(org=org).exists()
    # The page keeps what was typed and says why.
    page = api.post("/settings/exports/", {"path": path, "reason": "x"})
    assert page.status_code == 400 and f'value="{path}"' in page.content.decode()


def test_the_console_code_is_never_a_root_even_inside_a_wide_area(org, admin_user, settings):
    settings.CONSOLE_EXPORTS = ["/"]
    api = Client()
    api.force_login(admin_user)
    for path in (django_settings.BASE_DIR, Path(django_settings.BASE_DIR) / "recovery", "/"):
        r = api.post("/api/export-roots/", {"path": str(path)}, content_type="application/json")
        assert r.status_code == 400 and r.json()["reason"] in ("server_ground", "unsafe_path"), (path, r.json())


def test_only_admins_manage_roots(org, operator, viewer, admin_user, area):
    for person in (operator, viewer):
        c = Client()
        c.force_login(person)
        assert c.get("/settings/exports/").status_code == 403
        r = c.post("/api/export-roots/", {"path": str(area / "x")}, content_type="application/json")
        assert r.status_code == 403
    assert not ExportRoot.objects.exists()


def test_the_supervisor_checks_again_before_it_writes(org, other_org, agent, admin_user, area):
    """Destinations saved before this check existed, a root removed since, a root now outside the area: the
    supervisor refuses the export, writes nothing, and the export action says why."""
    theirs = area / "globex"
    theirs.mkdir()
    ExportRoot.objects.create(org=other_org, path=str(theirs), added_by="gina")
    (theirs / "report.txt").write_text("globex's report")
    mine = area / "acme"
    root = ExportRoot.objects.create(org=org, path=str(mine), added_by="ada")
    code = Path(django_settings.BASE_DIR) / "recovery"
    cases = {}
    for name, dest in (("theirs", theirs), ("code", code), ("removed", mine / "site")):
        task = e.start(org, [(W, {"path": "report.txt", "content": f"acme wrote this ({name})"})], title=name)
        Task.objects.filter(pk=task.pk).update(export_destination=str(dest))  # as an older row would hold it
        finish_all(e.first_run(task))
        cases[name] = task
    root.delete()
    supervise_once()
    for name, task in cases.items():
        export = Export.objects.get(task=task)
        assert not export.ok and export.result["refused"] == "outside_export_roots", (name, export.error)
        action = RecoveryAction.objects.get(task=task, kind="workspace_export", status="open")
        assert "not under an export root" in action.evidence["error"]
    assert (theirs / "report.txt").read_text() == "globex's report"
    assert not (code / "report.txt").exists() and not (mine / "site").exists()


def test_a_root_that_left_the_area_refuses_exports_under_it(org, agent, area, settings, tmp_path):
    mine = area / "acme"
    ExportRoot.objects.create(org=org, path=str(mine), added_by="ada")
    task = e.start(org, [(W, {"path": "a.txt", "content": "a"})], export_destination=str(mine / "site"))
    finish_all(e.first_run(task))
    settings.CONSOLE_EXPORTS = [tmp_path / "new-area"]  # the server's operator moved the area
    supervise_once()
    export = Export.objects.get(task=task)
    assert not export.ok and export.result["refused"] == "outside_export_area"
    assert not (mine / "site").exists()


def test_a_removed_root_is_said_and_recorded(org, other_org, admin_user, area, make_token_client):
    api = make_token_client(user_token(admin_user))
    r = api.post("/api/export-roots/", {"path": str(area / "acme"), "reason": "bundles"}, format="json")
    assert r.status_code == 201, r.content
    root = r.json()
    listed = api.get("/api/export-roots/").json()
    assert [x["path"] for x in listed["results"]] == [str(area / "acme")] and listed["area"] == [str(area)]
    assert api.delete(f"/api/export-roots/{root['id']}/").status_code == 204
    assert api.get("/api/export-roots/").json()["results"] == []
    kinds = list(org.events.order_by("id").values_list("kind", flat=True))
    assert kinds[-2:] == ["export_root_added", "export_root_removed"]
    # Another organization's admin can neither see nor remove it.
    again = api.post("/api/export-roots/", {"path": str(area / "acme")}, format="json").json()
    gina = make_token_client(user_token(make_member(other_org, "gina", "admin")))
    assert gina.get("/api/export-roots/").json()["results"] == []
    assert gina.delete(f"/api/export-roots/{again['id']}/").status_code == 404
    assert ExportRoot.objects.filter(pk=again["id"]).exists()
