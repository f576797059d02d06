"""The route matrix, generated from the URL conf: every route by anonymous, viewer, operator, admin, another
organization, a private task of someone else, and a form without its CSRF token → the documented status, and no
data of a task the caller may not see. A route added without a row here fails `test_every_route_has_a_row`.

The table is keyed by URL name (SECURITY.md explains the columns). Each request runs in a savepoint that is
rolled back, so every principal meets the same state and the order of the rows does not matter.
"""

from dataclasses import dataclass, field

import pytest
from django.db import transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone
from rest_framework.test import APIClient

from recovery.bulk.operations import bulk_preview
from recovery.models import Export, NotificationDestination, RecoveryBreaker, Repair, SavedView
from tasks.models import ExportRoot, Step
from tests.console.scenarios import unknown_outcome_action
from tests.factories import make_member, user_token, worker_token

PRINCIPALS = ("anonymous", "viewer", "operator", "admin", "other_org", "private", "no_csrf")
SECRET = "ACME-SECRET"  # in the titles of the organization's tasks: never in a refusal, never to outsiders
PRIVATE = "PRIVATE-SECRET"  # in the title of olive's private task: only olive and admins see it
# What each principal may never read, whatever it asked: outsiders nothing of the organization; the viewer and
# oscar (an operator who did not create it) not olive's private task. Olive (operator, no_csrf) and admins see all.
HIDDEN_FROM = {
    "anonymous": (SECRET, PRIVATE),
    "other_org": (SECRET, PRIVATE),
    "viewer": (PRIVATE,),
    "private": (PRIVATE,),
    "operator": (),
    "admin": (),
    "no_csrf": (),
}
NA = None  # the principal does not apply to the route (said why in `note`)


@dataclass(frozen=True)
class Row:
    """Expected statuses, one per principal. `kind` picks the client: page (session), api (token), runner (worker
    token), plain (anonymous endpoints)."""

    method: str
    kind: str
    statuses: dict
    kwargs: tuple = ()
    body: dict = field(default_factory=dict)
    note: str = ""
    fresh: bool = False  # the request ends the client's session: it gets a client of its own


def expect(anonymous, viewer, operator, admin, other_org, private, no_csrf) -> dict:
    return dict(zip(PRINCIPALS, (anonymous, viewer, operator, admin, other_org, private, no_csrf), strict=True))


# Reading pages: sign-in first; members read; other organizations and other people's private tasks are 404.
PAGE_READ = expect(302, 200, 200, 200, 404, 404, 200)
# A list page: everyone signed in gets it, filtered to what they may see (checked for leaks below).
PAGE_LIST = expect(302, 200, 200, 200, 200, 200, 200)
# A card or header action (operator): viewers get the styled refusal; a form without its token, the CSRF page.
PAGE_OPERATE = expect(302, 403, 200, 200, 404, 404, 403)
API_READ = expect(401, 200, 200, 200, 404, 404, 200)
API_LIST = expect(401, 200, 200, 200, 200, 200, 200)
# API writes with a session and no CSRF token are refused by DRF (403), with a token they need none.
API_OPERATE_200 = expect(401, 403, 200, 200, 404, 404, 403)

# fmt: off
TABLE: dict[str, Row] = {
    # --- pages ---------------------------------------------------------------------------------------------------
    "board": Row("GET", "page", PAGE_LIST),
    "inbox": Row("GET", "page", PAGE_LIST),
    "task": Row("GET", "page", PAGE_READ, ("task_id",)),
    "run": Row("GET", "page", PAGE_READ, ("agent", "run_id")),
    "task-workspace": Row("GET", "page", expect(302, 302, 302, 302, 404, 404, 302), ("task_id",),
                          note="no held copy named: back to the task page"),
    "workers": Row("GET", "page", PAGE_LIST),
    # Tool settings are their own organization's: globex's admin edits globex's (its "builder" is another agent).
    "settings-tools": Row("GET", "page", expect(302, 403, 403, 200, 200, 403, 403)),
    "settings-agent": Row("POST", "page", expect(302, 403, 403, 200, 200, 403, 403), ("agent",),
                          {"tool_mode_bash": "notify", "reason": "matrix"}),
    "settings-signin": Row("GET", "page", expect(302, 403, 403, 200, 200, 403, 403)),
    # Export roots are their own organization's: globex's admin reads globex's, and cannot remove acme's (404).
    "settings-exports": Row("GET", "page", expect(302, 403, 403, 200, 200, 403, 403)),
    "settings-exports-remove": Row("POST", "page", expect(302, 403, 403, 302, 404, 403, 403), ("root_id",)),
    # Notifications are the admin's own organization's: globex's admin reads globex's page, never acme's destination.
    "settings-notifications": Row("GET", "page", expect(302, 403, 403, 200, 200, 403, 403)),
    "settings-notifications-enable": Row("POST", "page", expect(302, 403, 403, 302, 404, 403, 403),
                                         ("destination_id",)),
    "settings-notifications-remove": Row("POST", "page", expect(302, 403, 403, 302, 404, 403, 403),
                                         ("destination_id",)),
    # Recovery limits are the admin's own organization's: globex's admin reads globex's.
    "settings-recovery": Row("GET", "page", expect(302, 403, 403, 200, 200, 403, 403)),
    "settings-signin-unlock": Row("POST", "page", expect(302, 403, 403, 302, 404, 403, 403), (),
                                  {"username": "olive"}, note="olive is no member of the other organization: 404"),
    "task-pause": Row("POST", "page", PAGE_OPERATE, ("task_id",)),
    "task-resume": Row("POST", "page", PAGE_OPERATE, ("task_id",)),
    "task-message": Row("POST", "page", PAGE_OPERATE, ("task_id",), {"body": "hello"}),
    # Offers again the follow-ups a closing left undelivered; with none, nothing happens (the header, 200).
    "task-messages-deliver": Row("POST", "page", PAGE_OPERATE, ("task_id",)),
    # An undecided unknown outcome: Continue now, start over and retry name the decision it needs (409).
    "task-continue": Row("POST", "page", expect(302, 403, 409, 409, 404, 404, 403), ("task_id",)),
    "task-owner": Row("POST", "page", expect(302, 403, 404, 404, 404, 404, 403), ("task_id",), {"agent": "nobody"}),
    "task-close": Row("POST", "page", PAGE_OPERATE, ("task_id",), {"resolution": "cancelled", "reason": "matrix"}),
    "task-reopen": Row("POST", "page", expect(302, 403, 409, 409, 404, 404, 403), ("task_id",), {"reason": "m"}),
    "task-budget": Row("POST", "page", expect(302, 403, 403, 200, 404, 404, 403), ("task_id",),
                       {"limit": "10", "budget_reason": "matrix"}),
    # Continue from step 1 would run the undecided file_write again: it needs the duplicate risk accepted (409).
    "task-continue-from": Row("POST", "page", expect(302, 403, 409, 409, 404, 404, 403), ("task_id",), {"seq": "1"}),
    "task-dependencies": Row("POST", "page", expect(302, 403, 404, 404, 404, 404, 403), ("task_id",),
                             {"add": "999999"}),
    "task-start-over": Row("POST", "page", expect(302, 403, 409, 409, 404, 404, 403), ("task_id",)),
    "run-stop": Row("POST", "page", PAGE_OPERATE, ("run_id",)),
    "action-retry": Row("POST", "page", expect(302, 403, 409, 409, 404, 404, 403), ("action_id",), {"version": "1"}),
    "action-decide": Row("POST", "page", PAGE_OPERATE, ("action_id",),
                         {"version": "1", "outcome": "unresolved", "note": "matrix"}),
    "action-cancel": Row("POST", "page", PAGE_OPERATE, ("action_id",), {"version": "1"}),
    # Repairs are for workspace actions (400 for this unknown outcome), and for admins.
    "action-repair": Row("POST", "page", expect(302, 403, 403, 400, 404, 404, 403), ("action_id",),
                         {"version": "1", "repair": "reconcile"}),
    "action-repair-task": Row("POST", "page", expect(302, 403, 403, 409, 404, 404, 403), ("action_id",),
                              {"agent": "builder"}),
    # --- triage: saved views and bulk operations ------------------------------------------------------------
    "view-save": Row("POST", "page", expect(302, 302, 302, 302, 302, 302, 403),
                     body={"name": "matrix view", "state": "all"}),
    "view-delete": Row("POST", "page", expect(302, 404, 302, 404, 404, 404, 403), ("view_id",),
                      note="a saved view is one person's: olive's is 404 to everyone else"),
    "bulk": Row("GET", "page", PAGE_LIST),
    "bulk-preview": Row("POST", "page", expect(302, 403, 302, 302, 404, 404, 403),
                        body={"action": "pause", "ids": "TASK"}),
    "bulk-detail": Row("GET", "page", expect(302, 200, 200, 200, 404, 200, 200), ("op_id",)),
    # Only the person who previewed executes, with the preview's hash (a wrong one is 409 scope_changed).
    "bulk-execute": Row("POST", "page", expect(302, 403, 409, 403, 404, 403, 403), ("op_id",),
                        {"scope_hash": "not-the-preview"}),
    "bulk-cancel": Row("POST", "page", expect(302, 403, 302, 302, 404, 302, 403), ("op_id",)),
    "bulk-retry-failed": Row("POST", "page", expect(302, 403, 409, 409, 404, 409, 403), ("op_id",),
                            note="nothing of a preview failed: 409"),
    # --- recovery breakers: members read them; only an admin closes one (reason required) ----------------------
    "breakers": Row("GET", "page", PAGE_LIST),
    "breaker": Row("GET", "page", expect(302, 200, 200, 200, 404, 200, 200), ("breaker_id",),
                   note="an organization's breaker is no private task's: oscar reads it"),
    "breaker-close": Row("POST", "page", expect(302, 403, 403, 302, 404, 403, 403), ("breaker_id",),
                         {"reason": "matrix"}),
    # --- accounts ----------------------------------------------------------------------------------------------
    "login": Row("GET", "page", expect(200, 302, 302, 302, 302, 302, 302), note="signed in: on to the board"),
    "logout": Row("POST", "page", expect(302, 302, 302, 302, 302, 302, 403), fresh=True),
    "password_change": Row("GET", "page", expect(302, 200, 200, 200, 200, 200, 200)),
    "password_change_done": Row("GET", "page", expect(302, 200, 200, 200, 200, 200, 200)),
    # --- plain endpoints ---------------------------------------------------------------------------------------
    "healthz": Row("GET", "plain", expect(200, 200, 200, 200, 200, 200, 200)),
    # An admin's token scrapes its own organizations; no credentials (a session is none) is 404.
    "metrics": Row("GET", "api", expect(404, 403, 403, 200, 200, 403, 404)),
    # --- operator API ------------------------------------------------------------------------------------------
    "api-tasks": Row("GET", "api", API_LIST),
    "api-task": Row("GET", "api", API_READ, ("task_id",)),
    "api-run": Row("GET", "api", API_READ, ("run_id",)),
    "api-run-stop": Row("POST", "api", API_OPERATE_200, ("run_id",)),
    "api-task-pause": Row("POST", "api", API_OPERATE_200, ("task_id",)),
    "api-task-resume": Row("POST", "api", API_OPERATE_200, ("task_id",)),
    "api-task-messages": Row("POST", "api", expect(401, 403, 201, 201, 404, 404, 403), ("task_id",), {"body": "hi"}),
    "api-task-messages-deliver": Row("POST", "api", expect(401, 403, 202, 202, 404, 404, 403), ("task_id",)),
    "api-task-owner": Row("POST", "api", expect(401, 403, 404, 404, 404, 404, 403), ("task_id",), {"agent": "nobody"}),
    "api-task-continue": Row("POST", "api", expect(401, 403, 409, 409, 404, 404, 403), ("task_id",)),
    "api-task-close": Row("POST", "api", API_OPERATE_200, ("task_id",), {"resolution": "cancelled", "reason": "m"}),
    "api-task-reopen": Row("POST", "api", expect(401, 403, 409, 409, 404, 404, 403), ("task_id",), {"reason": "m"}),
    "api-task-budget": Row("POST", "api", expect(401, 403, 403, 200, 404, 404, 403), ("task_id",),
                           {"limit": 10, "reason": "m"}),
    "api-task-dependencies": Row("POST", "api", expect(401, 403, 404, 404, 404, 404, 403), ("task_id",),
                                 {"add": [999_999]}),
    "api-task-start-over": Row("POST", "api", expect(401, 403, 409, 409, 404, 404, 403), ("task_id",)),
    # The preview only reads (operator); other organizations and other people's private tasks are 404.
    "api-task-continue-from": Row("POST", "api", API_OPERATE_200, ("task_id",), {"seq": 1, "preview": True}),
    "api-action": Row("GET", "api", API_READ, ("action_id",)),
    "api-action-retry": Row("POST", "api", expect(401, 403, 409, 409, 404, 404, 403), ("action_id",), {"version": 1}),
    "api-action-decision": Row("POST", "api", API_OPERATE_200, ("action_id",),
                               {"version": 1, "outcome": "unresolved", "note": "m"}),
    "api-action-cancel": Row("POST", "api", API_OPERATE_200, ("action_id",), {"version": 1}),
    "api-action-repair": Row("POST", "api", expect(401, 403, 403, 400, 404, 404, 403), ("action_id",),
                             {"version": 1, "repair": "reconcile"}),
    "api-action-repair-task": Row("POST", "api", expect(401, 403, 403, 409, 404, 404, 403), ("action_id",),
                                  {"agent": "builder"}),
    "api-task-workspace": Row("GET", "api", API_READ, ("task_id",)),
    "api-events": Row("GET", "api", API_LIST),
    # Agents are named per organization: globex's admin reads globex's own builder.
    "api-agent-settings": Row("GET", "api", expect(401, 403, 403, 200, 200, 403, 403), ("name",)),
    "api-bulk": Row("POST", "api", expect(401, 403, 201, 201, 404, 404, 403),
                    body={"action": "pause", "ids": ["TASK"]}),
    "api-bulk-detail": Row("GET", "api", expect(401, 200, 200, 200, 404, 200, 200), ("op_id",)),
    "api-bulk-execute": Row("POST", "api", expect(401, 403, 409, 403, 404, 403, 403), ("op_id",),
                            {"scope_hash": "not-the-preview"}),
    "api-bulk-cancel": Row("POST", "api", expect(401, 403, 200, 200, 404, 200, 403), ("op_id",)),
    "api-bulk-retry-failed": Row("POST", "api", expect(401, 403, 409, 409, 404, 409, 403), ("op_id",)),
    "api-breakers": Row("GET", "api", API_LIST),
    "api-breaker-close": Row("POST", "api", expect(401, 403, 403, 200, 404, 403, 403), ("breaker_id",),
                             {"reason": "m"}),
    "api-workers": Row("GET", "api", API_LIST),
    "api-export-roots": Row("GET", "api", expect(401, 403, 403, 200, 200, 403, 403)),
    "api-notify-destinations": Row("GET", "api", expect(401, 403, 403, 200, 200, 403, 403)),
    "api-notify-deliveries": Row("GET", "api", expect(401, 403, 403, 200, 200, 403, 403)),
    "api-export-root": Row("DELETE", "api", expect(401, 403, 403, 204, 404, 403, 403), ("root_id",)),
    "api-health": Row("GET", "api", API_LIST),
    "api-schema": Row("GET", "api", expect(200, 200, 200, 200, 200, 200, 200), note="public: it describes the API"),
    # --- runner API: worker tokens only; people are 403; another organization's worker holds nothing (409) -------
    # `private` and `no_csrf` do not apply: no task is named, no session is used.
    "runner-claim": Row("POST", "runner", expect(401, 403, 403, 403, 204, NA, NA)),
    "runner-heartbeat": Row("POST", "runner", expect(401, 403, 403, 403, 409, NA, NA), ("run_id",), {"epoch": 1}),
    "runner-step-plan": Row("POST", "runner", expect(401, 403, 403, 403, 409, NA, NA), ("run_id",),
                            {"epoch": 1, "seq": 9, "tool": "sleep", "args": {}}),
    "runner-step-dispatch": Row("POST", "runner", expect(401, 403, 403, 403, 409, NA, NA), ("run_id", "seq"),
                                {"epoch": 1}),
    "runner-step-complete": Row("POST", "runner", expect(401, 403, 403, 403, 409, NA, NA), ("run_id", "seq"),
                                {"epoch": 1, "ok": True}),
    "runner-finish": Row("POST", "runner", expect(401, 403, 403, 403, 409, NA, NA), ("run_id",),
                         {"epoch": 1, "status": "failed"}),
    "runner-child-task": Row("POST", "runner", expect(401, 403, 403, 403, 409, NA, NA), ("run_id",),
                             {"epoch": 1, "title": "t", "input": {"steps": []}}),
    # Agents are named per organization: globex's worker registers the tools of globex's own builder.
    "runner-agent-tools": Row("POST", "runner", expect(401, 403, 403, 403, 200, NA, NA), ("name",),
                              {"tools": [{"name": "lookup", "mode": "replay", "description": "d"}]}),
    "runner-messages-ack": Row("POST", "runner", expect(401, 403, 403, 403, 409, NA, NA), ("run_id",),
                               {"epoch": 1, "ids": [1]}),
    # Repair jobs: another organization's worker is handed none (204) and may not report one (404).
    "runner-repair-claim": Row("POST", "runner", expect(401, 403, 403, 403, 204, NA, NA), (),
                               {"worker": "w", "label": "box-a"}),
    "runner-repair-result": Row("POST", "runner", expect(401, 403, 403, 403, 404, NA, NA), ("repair_id",),
                                {"worker": "w", "ok": False}),
    # A worker's check of a workspace it holds: the run is not another organization's worker's (409, as any run).
    "runner-workspace": Row("POST", "runner", expect(401, 403, 403, 403, 409, NA, NA), ("run_id",),
                            {"epoch": 1, "files": []}),
    # Export jobs: another organization's worker is handed none (204) and may not report one (404).
    "runner-export-claim": Row("POST", "runner", expect(401, 403, 403, 403, 204, NA, NA), (), {"label": "box-a"}),
    "runner-export-result": Row("POST", "runner", expect(401, 403, 403, 403, 404, NA, NA), ("export_id",),
                                {"ok": False}),
    # --- the Django admin: staff only (none of these people is staff); one row for all its routes --------------
    "admin:*": Row("GET", "page", expect(302, 302, 302, 302, 302, 302, 302),
                   note="checked on the index and every registered model's list"),
}
# fmt: on


# --- the URL conf ------------------------------------------------------------------------------------


def routes() -> dict[str, str]:
    """Every route of the URL conf by name (`namespace:name`), with its pattern."""
    found: dict[str, str] = {}

    def walk(patterns, prefix: str, namespace: str | None):
        for p in patterns:
            if isinstance(p, URLResolver):
                walk(p.url_patterns, prefix + str(p.pattern), p.namespace or namespace)
            elif isinstance(p, URLPattern):
                name = p.name or (prefix + str(p.pattern))
                found[f"{namespace}:{name}" if namespace else name] = prefix + str(p.pattern)

    walk(get_resolver().url_patterns, "", None)
    return found


def row_for(name: str) -> Row | None:
    return TABLE.get(name) or TABLE.get(name.split(":")[0] + ":*") if ":" in name else TABLE.get(name)


def test_every_route_has_a_row():
    missing = sorted(n for n in routes() if row_for(n) is None)
    assert not missing, "routes without a row in the matrix (tests/console/test_route_matrix.py TABLE):\n" + "\n".join(
        missing
    )


def test_every_row_names_a_route():
    names = routes()
    stale = [n for n in TABLE if not (n in names or (n.endswith(":*") and any(k.startswith(n[:-1]) for k in names)))]
    assert not stale, f"rows for routes that no longer exist: {stale}"


# --- the scenario --------------------------------------------------------------------------------------


@dataclass
class Scenario:
    ids: dict
    private_ids: dict
    clients: dict
    fresh: dict  # kind -> principal -> a function making a new client


@pytest.fixture
def scenario(org, other_org, agent, viewer, operator, admin_user):
    from tests.factories import make_agent

    make_agent(other_org, "builder")
    action = unknown_outcome_action(org, title=f"{SECRET} write the report", creator=operator)
    hidden = unknown_outcome_action(org, title=f"{PRIVATE} olive's own", private=True, creator=operator)
    oscar = make_member(org, "oscar", "operator")  # sees the organization, not olive's private task
    stranger = make_member(other_org, "gina", "admin")
    seq = Step.objects.filter(run=action.run).order_by("seq").first().seq
    # olive's preview of a bulk pause over the organization's task, and olive's saved view of the board.
    op = bulk_preview(user=operator, action="pause", ids=[action.task_id])
    view = SavedView.objects.create(user=operator, org=org, name="olive's view", params={"state": "all"})
    root = ExportRoot.objects.create(org=org, path="/srv/exports/acme", added_by="ada")
    dest = NotificationDestination.objects.create(
        org=org, kind="webhook", url="https://hooks.example.com/acme", secret="whsec_c2VjcmV0", created_by="ada"
    )
    job = Repair.objects.create(action=action, repair="reconcile", status="queued", label="box-a")
    export = Export.objects.create(
        task_id=action.task_id, run_id=action.run_id, destination="/x", claimed_by="w/box-a", ok=False
    )
    now = timezone.now()
    breaker = RecoveryBreaker.objects.create(
        org=org,
        agent=agent,
        signature="sleep / lease_lapsed",
        tool="sleep",
        tasks=11,
        first_at=now,
        last_at=now,
        opened_at=now,
    )

    def ids(a):
        return {
            "task_id": a.task_id,
            "run_id": a.run_id,
            "action_id": a.pk,
            "agent": "builder",
            "name": "builder",
            "seq": seq,
            "op_id": op.pk,
            "view_id": view.pk,
            "root_id": root.pk,
            "destination_id": dest.pk,
            "breaker_id": breaker.pk,
            "repair_id": job.pk,
            "export_id": export.pk,
        }

    def session(user, *, csrf=False):
        c = Client(enforce_csrf_checks=csrf)
        c.force_login(user)
        return c

    def token(user):
        c = APIClient()
        c.credentials(HTTP_AUTHORIZATION=f"Token {user_token(user)}")
        return c

    def worker(org_):
        c = APIClient()
        c.credentials(HTTP_AUTHORIZATION=f"Token {worker_token(org_, 'matrix')}")
        return c

    people = {"viewer": viewer, "operator": operator, "admin": admin_user, "other_org": stranger, "private": oscar}
    clients = {
        "page": {
            "anonymous": Client(),
            **{k: session(u) for k, u in people.items()},
            "no_csrf": session(operator, csrf=True),
        },
        "api": {
            "anonymous": APIClient(),
            **{k: token(u) for k, u in people.items()},
            "no_csrf": APIClient(enforce_csrf_checks=True),
        },
        "runner": {
            "anonymous": APIClient(),
            **{k: token(u) for k, u in people.items() if k != "other_org"},
            "other_org": worker(stranger.memberships.get().org),
        },
        "plain": {"anonymous": Client(), **{k: session(u) for k, u in people.items()}, "no_csrf": Client()},
    }
    clients["api"]["no_csrf"].force_login(operator)
    fresh = {
        "page": {
            "anonymous": Client,
            **{k: (lambda u=u: session(u)) for k, u in people.items()},
            "no_csrf": lambda: session(operator, csrf=True),
        }
    }
    return Scenario(ids(action), ids(hidden), clients, fresh)


def with_ids(body: dict, ids: dict) -> dict:
    """The body with "TASK" standing for the task the principal is pointed at (its own or the private one)."""

    def one(v):
        if v == "TASK":
            return ids["task_id"]
        return [one(x) for x in v] if isinstance(v, list) else v

    return {k: one(v) for k, v in body.items()}


def call(scenario: Scenario, name: str, row: Row, principal: str):
    ids = scenario.private_ids if principal == "private" else scenario.ids
    url = reverse(name, kwargs={k: ids[k] for k in row.kwargs}) if not name.endswith(":*") else None
    client = scenario.fresh[row.kind][principal]() if row.fresh else scenario.clients[row.kind][principal]
    body = with_ids(row.body, ids)
    with transaction.atomic():
        if row.method == "GET":
            response = client.get(url)
        elif row.method == "DELETE":
            response = client.delete(url)
        elif row.kind in ("api", "runner"):
            response = client.post(url, body, format="json")
        else:
            response = client.post(url, body, HTTP_HX_REQUEST="true")
        transaction.set_rollback(True)
    return response


def admin_urls() -> list[str]:
    from django.contrib import admin

    return ["/admin/"] + [
        reverse(f"admin:{m._meta.app_label}_{m._meta.model_name}_changelist") for m in admin.site._registry
    ]


@pytest.mark.parametrize("principal", PRINCIPALS)
def test_every_route_answers_its_documented_status_and_leaks_nothing(scenario, principal):
    wrong, leaks, unstyled = [], [], []
    for name in sorted(routes()):
        row = row_for(name)
        expected = row.statuses[principal]
        if expected is NA or (name.startswith("admin:") and name != "admin:index"):
            continue
        if name == "admin:index":
            responses = []
            for url in admin_urls():
                client = scenario.clients["page"][principal]
                with transaction.atomic():
                    responses.append((url, client.get(url)))
                    transaction.set_rollback(True)
        else:
            responses = [(name, call(scenario, name, row, principal))]
        for where, response in responses:
            if response.status_code != expected:
                wrong.append(f"{where}: {principal} got {response.status_code}, documented {expected}")
            body = response.content.decode(errors="replace")
            styled = "refused-page" in body or (row.method == "POST" and 'class="refusal" role="alert"' in body)
            if response.status_code == 403 and row.kind == "page" and not styled:
                unstyled.append(f"{where}: {principal} got a 403 that is not the console's refusal: {body[:120]!r}")
            for marker in HIDDEN_FROM[principal]:
                if marker in body:
                    leaks.append(f"{where}: {principal} ({response.status_code}) saw {marker}")
    assert not wrong, "\n".join(wrong)
    assert not leaks, "\n".join(leaks)
    # A page refused for a role is the console's own: the styled page, or the refusal inside the card it swaps.
    assert not unstyled, "\n".join(unstyled)


def _overlong(body: dict) -> dict:
    return {k: ("x" * 100_000 if isinstance(v, str) else v) for k, v in body.items()}


def test_overlong_form_and_api_fields_are_refused_or_kept_never_a_500(scenario):
    """Every write route's text fields at 100,000 characters: a 4xx (or a 2xx where the text is kept whole)."""
    for name in sorted(routes()):
        row = row_for(name)
        if row.method != "POST" or not any(isinstance(v, str) for v in row.body.values()) or row.fresh:
            continue
        url = reverse(name, kwargs={k: scenario.ids[k] for k in row.kwargs})
        client = scenario.clients[row.kind]["admin"]
        with transaction.atomic():
            if row.kind in ("api", "runner"):
                response = client.post(url, _overlong(row.body), format="json")
            else:
                response = client.post(url, _overlong(row.body), HTTP_HX_REQUEST="true")
            transaction.set_rollback(True)
        assert response.status_code < 500, (name, response.status_code)


# --- the operator bypass of an exhausted bound (issue 20, item 9) ------------------------------------------------
# An exhausted step's action is cancelled by an operator; then Continue now (page, API) and bulk continue are refused
# with the gate and the role that can lift it, for every principal, and only the admin's grant on the card the
# refusal names admits another attempt. Each row: (route, principal) → status, and for a 409 the gate it names.

BYPASS = {
    "task-continue": expect(302, 403, 409, 409, 404, NA, 403),
    "api-task-continue": expect(401, 403, 409, 409, 404, NA, 403),
}
# The grant the refusal names: admins only (an operator is refused for the role, not the bound).
GRANT = expect(401, 403, 403, 202, 404, NA, 403)


@pytest.fixture
def bypass(org, other_org, agent, viewer, operator, admin_user):
    from recovery.actions.commands import action_cancel
    from recovery.models import RecoveryAction
    from recovery.supervisor.loop import supervise_once
    from tasks.models import Run
    from tests.recovery import engine as e

    first = e.interrupted(org, [e.SAFE, e.SAFE], 2, title=f"{SECRET} exhausted")
    supervise_once()
    second = e.crash_after_dispatch(Run.objects.get(continues=first), 2)
    supervise_once()
    action = RecoveryAction.objects.get(run=second, status="exhausted")
    action_cancel(action_id=action.pk, user=operator, version=action.version)
    # The bypass, once through the service: refused, and the bound is asked about again on an action of its own.
    from recovery.actions.controls import task_continue

    refused = task_continue(user=operator, task_id=second.task_id)
    assert refused.run is None and refused.gate.gate == "attempts_exhausted"
    stranger = make_member(other_org, "gina", "admin")
    people = {"viewer": viewer, "operator": operator, "admin": admin_user, "other_org": stranger}

    def page(user, csrf=False):
        c = Client(enforce_csrf_checks=csrf)
        c.force_login(user)
        return c

    def api(user):
        c = APIClient()
        c.credentials(HTTP_AUTHORIZATION=f"Token {user_token(user)}")
        return c

    no_csrf = APIClient(enforce_csrf_checks=True)
    no_csrf.force_login(operator)
    clients = {
        "page": {"anonymous": Client(), **{k: page(u) for k, u in people.items()}, "no_csrf": page(operator, True)},
        "api": {"anonymous": APIClient(), **{k: api(u) for k, u in people.items()}, "no_csrf": no_csrf},
    }
    return second, clients


@pytest.mark.parametrize("principal", [p for p in PRINCIPALS if p != "private"])
def test_the_operator_bypass_of_an_exhausted_step_is_refused_with_the_gate_and_who_lifts_it(bypass, principal):
    from recovery.models import RecoveryAction
    from tasks.models import Run

    second, clients = bypass
    runs = Run.objects.count()
    for name, statuses in BYPASS.items():
        kind = "page" if name == "task-continue" else "api"
        url = reverse(name, kwargs={"task_id": second.task_id})
        client = clients[kind][principal]
        if kind == "api":
            response = client.post(url, {}, format="json")
        else:
            response = client.post(url, {}, HTTP_HX_REQUEST="true")
        assert response.status_code == statuses[principal], (name, principal, response.status_code)
        if response.status_code == 409:
            reopened = RecoveryAction.objects.get(run=second, status="exhausted")
            lifted = f"an admin, with Grant one more attempt on recovery action #{reopened.pk}"
            if kind == "api":
                body = response.json()
                assert (body["code"], body["gate"], body["lifted_by"]) == ("gate_closed", "attempts_exhausted", lifted)
            else:
                assert "Continue now does not get past that bound" in response.content.decode()
        assert Run.objects.count() == runs, f"{name} by {principal} ran the exhausted step a third time"
    # The one grant that lifts it, on the action the refusal named.
    reopened = RecoveryAction.objects.get(run=second, status="exhausted")
    url = reverse("api-action-retry", kwargs={"action_id": reopened.pk})
    response = clients["api"][principal].post(url, {"version": reopened.version, "reason": "fixed"}, format="json")
    assert response.status_code == GRANT[principal], (principal, response.status_code, response.content[:200])
    assert Run.objects.count() == runs + (1 if response.status_code == 202 else 0)
