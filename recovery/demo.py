"""Seed the demo organization through the real engine.

Every state is reached the way production reaches it: tasks are created by the
service, a real worker process claims them over HTTP from a real daphne server
and executes real tools, a fault-injected worker really exits mid-step, and the
supervisor settles the lapsed lease. Nothing is faked with hand-written rows.
"""

import logging
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import httpx
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection

from recovery.actions.commands import action_retry
from recovery.actions.followups import message_save
from recovery.bulk.operations import bulk_advance, bulk_execute, bulk_preview
from recovery.models import RecoveryAction
from recovery.supervisor.loop import supervise_once
from recovery.supervisor.passes import default_label, supervisor_stopped
from tasks.accounts import agent_add, member_add, org_create, token_issue
from tasks.export_roots import export_root_add
from tasks.models import ExportRoot, Organization, Run, Task
from tasks.services import run_request_stop, task_create, task_pause

log = logging.getLogger("recovery.demo")
ROOT = Path(settings.BASE_DIR)
DEMO_LEASE_SECONDS = 3
AGENTS = ("courier", "analyst", "deployer")


def _plan(*steps) -> dict:
    return {"steps": [{"tool": t, "args": a} for t, a in steps]}


def _database_url() -> str:
    sd = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{sd['NAME']}"
    auth = sd.get("USER") or ""
    if sd.get("PASSWORD"):
        auth += f":{sd['PASSWORD']}"
    return (
        f"postgres://{auth + '@' if auth else ''}{sd.get('HOST') or '127.0.0.1'}:{sd.get('PORT') or 5432}/{sd['NAME']}"
    )


class EmbeddedServer:
    """A short-lease daphne of our own, so a crashed demo worker's lease lapses in seconds."""

    def __init__(self):
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "DATABASE_URL": _database_url(),
            "SECRET_KEY": settings.SECRET_KEY,
            "CONSOLE_LEASE_SECONDS": str(DEMO_LEASE_SECONDS),
            "CONSOLE_HEARTBEAT_SECONDS": "1",
            "CONSOLE_URL": self.url,
            "CONSOLE_WORKSPACES": str(settings.CONSOLE_WORKSPACES),
            "CONSOLE_EXPORTS": os.pathsep.join(str(p) for p in settings.CONSOLE_EXPORTS),
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "CONSOLE_HTTPS": "0",  # a private server on the loopback
        }

    def __enter__(self):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port), "config.asgi:application"],
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(150):
            try:
                httpx.get(self.url + "/accounts/login/", timeout=1)
                return self
            except httpx.HTTPError:
                time.sleep(0.2)
        self.proc.kill()
        raise RuntimeError("the demo's embedded server did not start")

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def worker(self, token: str, fault: str = "", background: bool = False):
        env = {**self.env, "CONSOLE_WORKER_TOKEN": token}
        if fault:
            env["WORKER_FAULT"] = fault
        cmd = [sys.executable, "manage.py", "worker", "--once", "--label", "demo"]
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if not background:
            self.check(proc, crash_expected=bool(fault))
        return proc

    def agent(self, token: str, name: str, *options: str) -> subprocess.Popen:
        """bin/demo_agents.py serving one pydantic-ai agent (a process of its own: the console never imports
        the SDK); it runs until the demo kills it or ends it with SIGTERM."""
        outbox = Path(settings.VAR_DIR) / "demo-outbox"  # the courier's sent mail, outside every workspace
        env = {**self.env, "CONSOLE_WORKER_TOKEN": token, "DEMO_OUTBOX": str(outbox), "PYTHONUNBUFFERED": "1"}
        cmd = [sys.executable, str(ROOT / "bin" / "demo_agents.py"), name, *options]
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    @staticmethod
    def end(proc, *, kill: bool = False) -> None:
        """SIGKILL (a crash) or SIGTERM (the SDK drains and exits 0) an agent process."""
        proc.kill() if kill else proc.terminate()
        out, _ = proc.communicate(timeout=30)
        if not kill and proc.returncode != 0:
            raise RuntimeError(f"a demo agent failed ({proc.returncode}):\n{out}")

    @staticmethod
    def check(proc, *, crash_expected: bool = False) -> None:
        out, _ = proc.communicate(timeout=120)
        if proc.returncode != 0 and not crash_expected:
            raise RuntimeError(f"a demo worker failed ({proc.returncode}):\n{out}")


def _wait(until, what: str, proc=None, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not until():
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"a demo agent exited while waiting for {what}:\n{proc.communicate()[0]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the demo waited {timeout:g} s for {what}")
        time.sleep(0.2)


def _settle(run: Run, timeout: float = 30) -> Run:
    """Let a lapsed lease lapse, and run supervisor passes until the run is final."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        supervise_once()
        run.refresh_from_db()
        if run.status not in ("queued", "running", "stopping"):
            return run
        time.sleep(0.5)
    return run


def seed(*, stdout=None, credentials: Path | None = None) -> dict:
    """Create the demo organization, people and agents; run the scenarios if it has no tasks yet."""
    org, _ = org_create(slug="demo", name="Demo Org")
    passwords = {}
    for username, role in (("admin", "admin"), ("operator", "operator"), ("viewer", "viewer")):
        password = secrets.token_urlsafe(9)
        member_add(org=org, username=username, role=role, password=password)
        passwords[username] = (role, password)
    agent_add(org=org, name="builder", auto_resume=True)
    agent_add(org=org, name="scout", auto_resume=True)
    agent_add(org=org, name="auditor", auto_resume=False)
    for name in AGENTS:  # pydantic-ai agents, served by bin/demo_agents.py
        agent_add(org=org, name=name, auto_resume=True)
    lines = [f"{name:9} {password}   ({role})" for name, (role, password) in passwords.items()]
    if credentials:
        credentials.parent.mkdir(parents=True, exist_ok=True)
        credentials.write_text("sign in as:\n" + "\n".join(lines) + "\n")
    if Task.objects.filter(org=org).exists():
        if stdout:
            stdout.write("demo tasks already exist; passwords were reset")
        return passwords
    run_scenarios(org, stdout=stdout)
    return passwords


def _export_root(org: Organization) -> Path:
    """The demo organization's export root, in this server's export area, added by its admin as a person would."""
    path = Path(os.path.realpath(settings.CONSOLE_EXPORTS[0])) / org.slug
    root = ExportRoot.objects.filter(org=org, path=str(path)).first()
    if root is None:
        admin = get_user_model().objects.get(username="admin")
        export_root_add(actor=admin, org_id=org.pk, path=str(path), reason="the demo's release bundles")
    return path


def workspace_scenarios(make, work, settle, say, *, exports: Path) -> dict:
    """A workspace that diverged after a crash, and an export that failed: each waits for an admin's repair."""
    task = make(
        "Draft the changelog",
        "builder",
        ("file_write", {"path": "CHANGELOG.md", "content": "# 1.4\n- sync is faster\n"}),
        ("file_write", {"path": "notes.txt", "content": "internal notes\n"}),
        ("sleep", {"seconds": 1}),
        ("file_edit", {"path": "CHANGELOG.md", "old": "faster", "new": "twice as fast"}),
    )
    work("crash_after_dispatch:3@1")  # the worker dies in a step that is safe to replay...
    workspace = Path(task.workspace)
    # ...and before anything resumes, a person edits the files by hand.
    with open(workspace / "CHANGELOG.md", "a") as fh:
        fh.write("- login no longer times out\n")
    (workspace / "RELEASE-DATE").write_text("2025-06-02\n")
    settle(task)  # the automatic resume validates the workspace first: it differs, so nothing resumes
    say(
        task,
        "files edited by hand after a crash: workspace validation failed; an admin reconciles "
        "(RELEASE-DATE is adopted, CHANGELOG.md is held: step 4 edits it) or reissues",
    )
    diverged = task

    blocker = exports / f"release-{secrets.token_hex(3)}"  # under the organization's export root
    blocker.write_text("A file where the export directory should be: remove it, then Retry export.\n")
    task = make(
        "Publish the release bundle",
        "builder",
        ("file_write", {"path": "index.html", "content": "<h1>Release 1.4</h1>\n"}),
        ("bash", {"command": "mkdir -p assets && echo 'body{}' > assets/site.css"}),
        export_destination=str(blocker / "site"),
    )
    work()
    settle(task)  # it succeeded; the supervisor's export finds a file where the directory should be
    say(task, f"done, but its export failed: remove {blocker} and an admin uses Retry export")
    return {"diverged": diverged, "export": task, "blocker": blocker}


def agent_scenarios(server: EmbeddedServer, token: str, settle, say, *, org: Organization, operator) -> dict:
    """pydantic-ai agents (bin/demo_agents.py: function models, tools reading their workspaces) under the real
    engine: one cut off in a notify call, one stopped and given a follow-up, one whose replay diverges."""

    def make(title: str, agent: str, prompt: str, files: dict) -> tuple[Task, Run]:
        task = task_create(org=org, actor="demo", title=title, agent=agent, input={"prompt": prompt})
        for name, text in files.items():  # inputs put in the workspace before the first run: its baseline
            Path(task.workspace, name).write_text(text)
        return task, task.runs.get()

    def dispatched(run: Run, tool: str):
        return lambda: run.steps.filter(tool=tool, phase="dispatched").exists()

    task, run = make(
        "Remind the overdue customers",
        "courier",
        "Send a payment reminder for every overdue invoice.",
        {
            "invoices.csv": "invoice,customer,email,amount,status\n"
            "INV-101,Ana,ana@example.com,EUR 40,overdue\n"
            "INV-102,Bo,bo@example.com,EUR 75,paid\n"
            "INV-103,Cy,cy@example.com,EUR 120,overdue\n"
        },
    )
    proc = server.agent(token, "courier", "--slow", "60")
    try:
        _wait(dispatched(run, "reminder_send"), "the courier's reminder", proc)
    finally:
        server.end(proc, kill=True)  # SIGKILLed while the email may or may not have gone out
    settle(task)
    say(task, "pydantic-ai agent killed while sending a reminder (notify): a decision, with its conversation")
    courier = task

    task, run = make(
        "Summarise the support tickets",
        "analyst",
        "Summarise this week's support tickets.",
        {"tickets.txt": "Ana: login fails\nBo: export is slow\nAna: password reset mail missing\nCy: sync stalls\n"},
    )
    proc = server.agent(token, "analyst", "--slow", "2")
    try:
        _wait(dispatched(run, "tickets_tally"), "the analyst's tally", proc)
        run_request_stop(actor=operator, run=run)  # a person's Stop: the run ends at its next step boundary
        _wait(lambda: Run.objects.filter(pk=run.pk, status="stopped").exists(), "the analyst to stop", proc)
        message_save(user=operator, task=task, body="Which customer should support call first?")
        supervise_once()  # the follow-up is carried by a continuation, which replays the saved turns
        _wait(lambda: Run.objects.filter(continues=run, status="succeeded").exists(), "the analyst's answer", proc)
    finally:
        server.end(proc)
    say(task, "pydantic-ai agent stopped by a person, given a follow-up: its continuation answers it, done")
    analyst = task

    task, run = make(
        "Raise the API rate limits",
        "deployer",
        "Raise the rate limits to twice what they are.",
        {"limits.toml": "[api]\nrequests_per_minute = 600\n"},
    )
    proc = server.agent(token, "deployer", "--slow", "60")
    try:
        _wait(dispatched(run, "limits_read"), "the deployer's read", proc)
    finally:
        server.end(proc, kill=True)  # killed in a call safe to replay: the supervisor continues it by itself...
    settle(task)
    proc = server.agent(token, "deployer", "--revised")  # ...and the agent comes back with other instructions
    try:
        _wait(lambda: Run.objects.filter(continues=run, status="failed").exists(), "the deployer's replay", proc)
    finally:
        server.end(proc)
    say(task, "pydantic-ai agent redeployed with other instructions after a crash: its replay diverged, a decision")
    return {"courier": courier, "analyst": analyst, "deployer": task}


def run_scenarios(org: Organization, *, stdout=None) -> None:
    """Each task reaches its state the way production gets there; nothing is written by hand."""
    token = token_issue(worker="demo-worker", org=org)
    operator = get_user_model().objects.get(username="operator")

    def say(task: Task, what: str) -> None:
        if stdout:
            stdout.write(f"  task #{task.pk} {task.title!r}: {what}")

    with EmbeddedServer() as server:

        def make(title: str, agent: str, *steps, **extra) -> Task:
            return task_create(org=org, actor="demo", title=title, agent=agent, input=_plan(*steps), **extra)

        def work(fault: str = "") -> None:
            server.worker(token, fault=fault)

        def settle(task: Task) -> Run:
            run = _settle(task.runs.order_by("-id").first(), timeout=DEMO_LEASE_SECONDS * 10)
            supervise_once()
            return run

        task = make(
            "Write the release notes",
            "builder",
            ("file_write", {"path": "notes.md", "content": "# Release 1.4\n"}),
            ("bash", {"command": "echo '- faster sync' >> notes.md"}),
            ("file_read", {"path": "notes.md"}),
        )
        work()
        say(task, "done in one run")

        task = make(
            "Summarise the incident log",
            "scout",
            ("file_write", {"path": "log.txt", "content": "12:00 sync stalled\n"}),
            ("file_read", {"path": "log.txt"}),
            ("sleep", {"seconds": 1}),
            ("file_read", {"path": "log.txt"}),
        )
        work("crash_after_dispatch:3@1")  # the worker dies while step 3 (safe to replay) runs
        settle(task)  # the supervisor continues it by itself, reusing steps 1-2
        work()
        say(task, "worker killed mid-step, resumed automatically, done")

        task = make(
            "Send the weekly digests",
            "builder",
            (
                "foreach",
                {
                    "items": ["ana", "bo", "cy", "dee", "eli"],
                    "do": {"tool": "todo_add", "args": {"text": "digest for {{item}}"}},
                },
            ),
            ("list_files", {}),
        )
        work("crash_after_dispatch:100003@1")  # the worker dies during item 3 of the batch of 5
        settle(task)  # items 1-2 are reused, item 3 is safe to run again, 4-5 never started
        work()
        say(task, "batch cut off during item 3 of 5: resumed item by item, items 1-2 not run again, done")

        task = make(
            "Post the release to the partner webhooks",
            "builder",
            (
                "foreach",
                {
                    "items": ["https://partner-a.invalid/hook", "https://partner-b.invalid/hook"],
                    "do": {"tool": "http_post", "args": {"url": "{{item}}", "json": {"release": "1.4"}}},
                },
            ),
        )
        work("crash_after_dispatch:100001@1")  # dies after dispatching the first post: outcome unknown
        settle(task)
        say(task, "batch item 1 (http_post) cut off after dispatch: a decision about that item")

        task = make(
            "Publish the pricing page",
            "builder",
            ("list_files", {}),
            ("file_write", {"path": "pricing.html", "content": "<h1>Pricing</h1>\n"}),
            ("bash", {"command": "wc -c pricing.html"}),
        )
        work("crash_after_dispatch:2@1")  # dies after dispatching a file write: outcome unknown
        settle(task)
        say(task, "unknown outcome of a file_write: needs a decision")

        task = make(
            "Migrate the billing webhooks",
            "builder",
            ("list_files", {}),
            ("sleep", {"seconds": 1}),
            ("file_write", {"path": "webhooks.json", "content": "{}"}),
        )
        work("crash_after_dispatch:2@1")
        settle(task)  # resumed once automatically...
        work("crash_after_dispatch:2@2")  # ...and the same step is interrupted again
        settle(task)
        say(task, "interrupted twice on the same step: exhausted, an admin decides")

        task = make(
            "Refactor the importer",
            "builder",
            ("sleep", {"seconds": 1}),
            ("sleep", {"seconds": 30}),
            ("file_write", {"path": "importer.py", "content": "# v2\n"}),
        )
        run = task.runs.get()
        proc = server.worker(token, background=True)
        for _ in range(150):
            if run.steps.filter(seq=2, phase="dispatched").exists():
                break
            time.sleep(0.2)
        run_request_stop(actor=operator, run=run)
        server.check(proc)
        task_pause(actor=operator, task=task)
        message_save(user=operator, task=task, body="Keep the old CSV parser; only the JSON path changes.")
        supervise_once()
        say(task, "stopped by a person, paused, a follow-up waits")

        # Before the retry below queues a run that the live worker is left to pick up.
        workspace_scenarios(make, work, settle, say, exports=_export_root(org))
        agent_scenarios(server, token, settle, say, org=org, operator=operator)

        task = make(
            "Sync the CRM export",
            "auditor",
            ("file_write", {"path": "export.csv", "content": "id,name\n"}),
            ("sleep", {"seconds": 1}),
            ("file_read", {"path": "export.csv"}),
        )
        work("crash_after_dispatch:2@1")
        settle(task)  # the auditor does not resume by itself: an action opens
        action = RecoveryAction.objects.get(task=task, status="open")
        action_retry(action_id=action.pk, user=operator, version=action.version)
        say(task, "auto-resume off: an operator asked for a retry; the live worker picks it up")
    supervisor_stopped(label=default_label())  # its passes ran in this process, which ends now

    task = task_create(
        org=org,
        actor="demo",
        title="Nightly dependency audit",
        agent="builder",
        input=_plan(
            ("bash", {"command": "echo audit > audit.txt"}),
            ("sleep", {"seconds": 20}),
            ("file_read", {"path": "audit.txt"}),
        ),
    )
    say(task, "queued for the worker")

    # Triage at scale, once: an operator holds two queued rebuilds with one bulk pause (preview, confirm, done).
    shards = [
        task_create(
            org=org,
            actor="demo",
            title=f"Rebuild the search index, shard {n} of 2",
            agent="scout",
            input=_plan(("sleep", {"seconds": 1})),
        )
        for n in (1, 2)
    ]
    op = bulk_preview(user=operator, action="pause", ids=[t.pk for t in shards])
    bulk_execute(user=operator, op_id=op.pk, scope_hash=op.scope_hash)
    while bulk_advance(budget=5):
        pass
    for shard in shards:
        say(shard, f"paused by bulk operation #{op.pk}, with the other shard; Resume task lets its queued run go")
