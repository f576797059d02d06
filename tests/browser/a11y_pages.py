"""Every page the accessibility check visits, in one list: a new page is one `Visit` line here.

`path` is formatted with the fields of `A11yScenario` (add a field and build it in
`a11y_scenario` when a page needs its own data). `roles` are who visits it
("anonymous" visits signed out); `prepare` brings the page into a state worth
checking (a form asking to confirm, an open dialog). Every `<details>` is opened
before the check, so folded content is checked too.
"""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from axes.models import AccessAttempt
from django.test import override_settings
from django.utils import timezone
from playwright.sync_api import Page, expect

from console.views.triage import TABS
from recovery import notify
from recovery.actions.commands import action_decide, actions_settle
from recovery.models import NOTICE_TYPES, HeldCopy, NotificationDestination, RecoveryBreaker
from recovery.modes import profile_update
from tests.console.scenarios import claim, continuation_action, unknown_outcome_action
from tests.factories import make_agent

PEOPLE = ("viewer", "operator", "admin")
ROLES = ("anonymous", *PEOPLE)
USERNAMES = {"viewer": "victor", "operator": "olive", "admin": "ada"}  # the conftest's member fixtures


@dataclass(frozen=True)
class A11yScenario:
    agent: str
    unknown_task: int  # a live unknown-outcome action (needs a decision)
    unknown_run: int
    exhausted_task: int
    settled_task: int  # its action was decided and its continuation started: a settled card
    continuation_task: int  # safe to continue, but its agent does not resume by itself
    workspace_task: int  # a live workspace_validation card: files, diffs, repair confirmations
    workspace_run: int  # the run validation refused: the run page hosts the repair controls
    export_task: int  # a live workspace_export card
    held_task: int  # a reconcile held a file: the panel links its held copy
    held_copy: int
    bulk_preview: int  # a bulk preview waiting to be confirmed
    bulk_done: int  # a finished bulk operation: its progress and ledger
    diverged_task: int  # an agent run whose replay took another path: its card shows both calls
    agent_run: int  # an agent run that succeeded: its prompt, notice-free steps, token usage and output
    breaker: int  # a recovery breaker open on coder: the header warns on every page, its page offers Close


def a11y_scenario(org, admin) -> A11yScenario:
    """Each kind of card, made through the real services."""
    # First: its crashes lapse every live lease, which would interrupt the settled card's continuation.
    diverged, export, held = workspace_scenario(org, admin)
    notifications_scenario(org, admin)
    make_agent(org, "careful", auto_resume=False)
    exhausted = unknown_outcome_action(org, title="Post the invoice to the billing hook")
    actions_settle(now=timezone.now() + timedelta(days=3))  # before the others, which would age too
    continuation = continuation_action(org, title="Read the meeting notes")
    unknown = unknown_outcome_action(org, title="Write the weekly report")
    settled = unknown_outcome_action(org, title="Write the quarterly summary")
    action_decide(action_id=settled.pk, user=admin, version=settled.version, outcome="performed", note="on disk")
    claim(settled.task)  # its continuation starts (last: a later lapse would interrupt it): the action is resolved
    profile_update(
        actor=admin,
        profile=org.agents.get(name="builder").profile,
        modes={"http_post": "replay", "bash": "forget"},
        confirm_replay=["http_post"],
        reason="the billing hook dedupes on its request id",
    )
    bulk_preview, bulk_done = bulk_scenario(admin, [unknown.task_id, continuation.task_id, exhausted.task_id])
    diverged_task, agent_run = agent_scenario(org)
    # A member locked out of signing in from another address (the record django-axes keeps), for the locks page.
    AccessAttempt.objects.create(
        username="victor",
        ip_address="203.0.113.7",
        failures_since_start=5,
        user_agent="a11y",
        http_accept="*/*",
        path_info="/accounts/login/",
        get_data="",
        post_data="",
    )
    breaker = open_breaker(org, "coder")
    return A11yScenario(
        breaker=breaker,
        bulk_preview=bulk_preview,
        bulk_done=bulk_done,
        workspace_task=diverged.task_id,
        workspace_run=diverged.run_id,
        export_task=export.task_id,
        held_task=held.task_id,
        held_copy=HeldCopy.objects.get(task_id=held.task_id).pk,
        agent="builder",
        unknown_task=unknown.task_id,
        unknown_run=unknown.run_id,
        exhausted_task=exhausted.task_id,
        settled_task=settled.task_id,
        continuation_task=continuation.task_id,
        diverged_task=diverged_task,
        agent_run=agent_run,
    )


def agent_scenario(org) -> tuple[int, int]:
    """Two agent runs of `coder` (a prompt, model turns with tokens): one that diverged on replay, one that
    returned its output. Claimed by agent, so the other scenarios' queued runs are left alone."""
    from tasks import services
    from tests.agents_api import model_args
    from tests.console.scenarios import worker_of

    make_agent(org, "coder")
    worker = worker_of(org)
    runs = []
    for title in ("Summarise the incident", "Tidy the changelog"):
        services.task_create(org=org, actor="test", title=title, agent="coder", input={"prompt": title})
        run = services.run_claim(worker=worker, label="a11y", agents=["coder"])
        held = {"worker": worker, "run_id": run.pk, "epoch": run.lease_epoch}
        services.step_plan(**held, seq=1, tool="model", args=model_args({"messages": [title]}))
        services.step_dispatch(**held, seq=1)
        services.step_complete(**held, seq=1, ok=True, result={"text": "read it"},
                               usage={"input_tokens": 812, "output_tokens": 64})  # fmt: skip
        runs.append((run, held))
    (diverged, held), (done, done_held) = runs
    services.run_finish(**held, status="failed", error_code="diverged", diverged={
        "seq": 2,
        "saved": {"tool": "file_read", "args": {"path": "incident.md"}},
        "asked": {"tool": "file_read", "args": {"path": "postmortem.md"}},
    })  # fmt: skip
    services.run_finish(**done_held, status="succeeded", output={"summary": "2 entries merged"})
    return diverged.task_id, done.pk


def open_breaker(org, agent: str) -> int:
    """A breaker open on `agent` as the supervisor would have tripped it (its sentence in every page's header)."""
    now = timezone.now()
    return RecoveryBreaker.objects.create(
        org=org,
        agent=org.agents.get(name=agent),
        signature="http_post / connection_refused",
        tool="http_post",
        tasks=14,
        first_at=now - timedelta(minutes=6),
        last_at=now,
        opened_at=now,
    ).pk


def bulk_scenario(admin, task_ids: list[int]) -> tuple[int, int]:
    """A preview waiting for its confirmation, and an operation run to its end (every item skipped: nothing here
    is paused, so the other pages keep their states)."""
    from recovery.bulk.operations import bulk_advance, bulk_execute, bulk_preview

    pending = bulk_preview(user=admin, action="pause", ids=task_ids)
    done = bulk_preview(user=admin, action="resume", ids=task_ids)
    bulk_execute(user=admin, op_id=done.pk, scope_hash=done.scope_hash)
    bulk_advance(budget=10)
    return pending.pk, done.pk


def workspace_scenario(org, admin):
    """A workspace changed by hand after a crash, an export that failed, and a reconcile that held a file."""
    import tempfile
    from pathlib import Path

    from recovery.models import RecoveryAction
    from recovery.supervisor.loop import supervise_once
    from recovery.workspaces.repairs import action_repair
    from tasks.models import ExportRoot, Task
    from tests.recovery import engine as e
    from tests.recovery.workdisk import crash_at, edit_by_hand, finish_all, validation_action

    plan = [
        ("file_write", {"path": "docs/CHANGELOG.md", "content": "# 1.4\n- sync is faster\n"}),
        ("sleep", {"seconds": 0}),
        ("file_write", {"path": "docs/CHANGELOG.md", "content": "# 1.4\n- sync is twice as fast\n"}),
    ]
    made = []
    for title in ("Draft the changelog", "Draft the release notes"):
        task = e.start(org, plan, title=title)
        crash_at(e.first_run(task), 2)
        edit_by_hand(task, "docs/CHANGELOG.md", "# 1.4\n- sync is faster\n- login no longer times out\n")
        edit_by_hand(task, "RELEASE-DATE", "2025-06-02\n")
        supervise_once()
        made.append(validation_action(task))
    held = made[1]
    action_repair(action_id=held.pk, user=admin, version=held.version, repair="reconcile", run=held.run_id)
    blocker = Path(tempfile.mkdtemp()) / "exports"
    blocker.write_text("in the way")
    task = e.start(org, [("file_write", {"path": "index.html", "content": "<h1>1.4</h1>\n"})], title="Publish")
    Task.objects.filter(pk=task.pk).update(export_destination=str(blocker / "site"))
    ExportRoot.objects.create(org=org, path=str(blocker.parent), added_by="ada")
    finish_all(e.first_run(task))
    with override_settings(CONSOLE_EXPORTS=[blocker.parent]):
        supervise_once()
    return made[0], RecoveryAction.objects.get(task=task, kind="workspace_export"), held


def notifications_scenario(org, admin) -> None:
    """A destination told of everything (the actions opened after it write its deliveries) and one failing."""
    notify.destination_add(
        actor=admin, org_id=org.pk, kind="webhook", url="http://127.0.0.1:9/hook", events=list(NOTICE_TYPES)
    )
    failing, _ = notify.destination_add(
        actor=admin, org_id=org.pk, kind="webhook", url="https://hooks.example.com/acme", events=["exhausted"]
    )
    NotificationDestination.objects.filter(pk=failing.pk).update(
        failures=3, failing_since=timezone.now(), last_error="ConnectError: connection refused"
    )


def notifications_delivered(page: Page) -> None:
    """The admin added a destination: the page shows its signing secret, once."""
    page.get_by_label("URL").fill("https://hooks.example.com/new")
    page.get_by_role("button", name="Add destination").click()
    expect(page.locator("#destination-secret")).to_contain_text("whsec_")


def settings_asking_to_confirm(page: Page) -> None:
    """The admin moved careful's file_write to replay and saved: the form asks to confirm it, with a reason."""
    section = page.locator("details.profile[data-agent='careful']")
    section.locator("summary").first.click()
    section.locator("details.defaults > summary").click()
    section.get_by_label("Recovery mode of file_write for careful").select_option("replay")
    section.get_by_role("button", name="Save careful").click()
    expect(page.locator("details.profile[data-agent='careful'] .confirm")).to_be_visible()


def sign_in_locked(page: Page) -> None:
    """Wrong passwords for one name until django-axes locks it: the sign-in page says so."""
    from django.conf import settings

    for _ in range(settings.AXES_FAILURE_LIMIT):
        page.get_by_label("Username").fill("mallory")
        page.get_by_label("Password").fill("not the password")
        page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("Signing in is locked")


@dataclass(frozen=True)
class Visit:
    name: str
    path: str
    roles: tuple[str, ...] = PEOPLE
    status: int = 200
    prepare: Callable[[Page], None] | None = None

    def url(self, scenario: A11yScenario) -> str:
        return self.path.format(**scenario.__dict__)


PAGES: list[Visit] = [
    Visit("sign-in", "/accounts/login/", roles=("anonymous",)),
    Visit("sign-in locked", "/accounts/login/", roles=("anonymous",), status=200, prepare=sign_in_locked),
    Visit("change password", "/accounts/password_change/"),
    Visit("password changed", "/accounts/password_change/done/"),
    *(Visit(f"board: {label}", f"/?state={key}") for key, label in TABS),
    Visit("board: filtered, most urgent first", "/?state=needs_decision&sort=urgency&tool=file_write&age=1h"),
    Visit("inbox", "/inbox/"),
    Visit("bulk history", "/bulk/"),
    Visit("bulk preview", "/bulk/{bulk_preview}/"),
    Visit("bulk operation finished, its ledger", "/bulk/{bulk_done}/"),
    Visit("task: live unknown-outcome card", "/tasks/{unknown_task}/"),
    Visit("task: exhausted card", "/tasks/{exhausted_task}/"),
    Visit("task: settled card", "/tasks/{settled_task}/"),
    Visit("task: continuation waiting for an operator", "/tasks/{continuation_task}/"),
    Visit("run", "/agents/{agent}/runs/{unknown_run}/"),
    Visit("task: an agent's replay diverged, both calls side by side", "/tasks/{diverged_task}/"),
    Visit("run of an agent: prompt, tokens, output", "/agents/coder/runs/{agent_run}/"),
    Visit(
        "continue from step 1: the preview asks to accept the duplicate risk, with a reason",
        "/tasks/{unknown_task}/continue-from/?seq=1",
        roles=("operator", "admin"),
    ),
    Visit("continue from a step refused", "/tasks/{unknown_task}/continue-from/?seq=1", roles=("viewer",), status=403),
    Visit("workers and supervisor", "/workers/"),
    Visit("recovery breakers", "/breakers/"),
    Visit("a recovery breaker: the tasks it counted, Close for admins", "/breakers/{breaker}/"),
    Visit("task: workspace changed, repair confirmations", "/tasks/{workspace_task}/"),
    Visit("run refused by workspace validation, repair controls", "/agents/{agent}/runs/{workspace_run}/"),
    Visit("task: export failed", "/tasks/{export_task}/"),
    Visit("task: a reconcile held a file", "/tasks/{held_task}/"),
    Visit("held copy", "/tasks/{held_task}/workspace/?held={held_copy}"),
    Visit("tool settings", "/settings/tools/", roles=("admin",)),
    Visit("tool settings asking to confirm", "/settings/tools/", roles=("admin",), prepare=settings_asking_to_confirm),
    Visit("tool settings refused", "/settings/tools/", roles=("viewer", "operator"), status=403),
    Visit("sign-in locks, a member locked", "/settings/sign-in/", roles=("admin",)),
    Visit("sign-in locks refused", "/settings/sign-in/", roles=("viewer", "operator"), status=403),
    Visit("export roots", "/settings/exports/", roles=("admin",)),
    Visit("export roots refused", "/settings/exports/", roles=("viewer", "operator"), status=403),
    Visit("notifications: destinations and the delivery log", "/settings/notifications/", roles=("admin",)),
    Visit(
        "notifications: a destination added, its secret shown once",
        "/settings/notifications/",
        roles=("admin",),
        prepare=notifications_delivered,
    ),
    Visit("notifications refused", "/settings/notifications/", roles=("viewer", "operator"), status=403),
    Visit("recovery limits", "/settings/recovery/", roles=("admin",)),
    Visit("recovery limits refused", "/settings/recovery/", roles=("viewer", "operator"), status=403),
    Visit("board: search by an error's words", "/?q=disk"),
    Visit("page not found", "/no/such/page/", roles=ROLES, status=404),
    Visit("a task nobody can see", "/tasks/999999/", status=404),
    Visit("a request that cannot be read", "/?q=a%00b", roles=ROLES, status=400),
    Visit("a board cursor that cannot be read", "/?cursor=yesterday", status=400),
]


def pages_for(role: str) -> list[Visit]:
    return [v for v in PAGES if role in v.roles]
