"""Live equals reload (issue 20, items 5 and 7): a page that received the pushes, and a page that reconnected,
says what a fresh reload of the same saved state says.

Each journey below drives the real engine (the services a worker, a person and the supervisor call) through the
card and row kinds of docs/words.md while a task page, its first run's page and the board are open on real
sockets (the ASGI application, the relay). After every change each open page — its drawn HTML with every pushed
fragment applied the way htmx applies it — is compared with a fresh reload: the words a person sees, the times
by their `datetime` attribute (the text of a relative time may differ), and the version each control acts on.
A page drawn before the journey began is also reconnected at each step (a resync with `reconnect`) and compared.
"""

import difflib
import re
import time
from html.parser import HTMLParser

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.db.models import Max, Q

from console.live.snapshots import changes_inbox
from console.live.updates import task_update
from recovery.actions.commands import action_cancel, action_decide, action_retry
from recovery.actions.controls import task_close, task_continue, task_dependencies, task_reopen
from recovery.actions.followups import message_save
from recovery.actions.start_over import task_start_over
from recovery.models import RecoveryAction
from recovery.supervisor.loop import supervise_once
from recovery.workspaces.repairs import action_repair
from tasks.models import Event, Message, Run, Task
from tasks.services import messages_ack, run_heartbeat, run_request_stop, task_pause, task_resume
from tests.factories import make_agent
from tests.helpers import outer_html, visible_text
from tests.live.sockets import connect, cursor_of, live_settings, page_html  # noqa: F401 (a fixture)
from tests.recovery import engine as e
from tests.recovery.workdisk import crash_at, edit_by_hand, validation_action

pytestmark = pytest.mark.django_db(transaction=True)

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
CSRF = re.compile(r'<input type="hidden" name="csrfmiddlewaretoken" value="[^"]*">')
TIME = re.compile(r'<time\b[^>]*\bdatetime="([^"]*)"[^>]*>.*?</time>', re.S)
VERSION = re.compile(r'name="(version|run)" value="([^"]*)"')


# --- a page as htmx keeps it --------------------------------------------------------------------------------


def top_elements(html: str) -> list[str]:
    """The top-level elements of a pushed message, in order (what htmx's websocket extension swaps one by one)."""

    class Top(HTMLParser):
        def __init__(self):
            super().__init__(convert_charrefs=False)
            self.depth, self.start, self.found = 0, None, []

        def at(self) -> int:
            line, col = self.getpos()
            return starts[line - 1] + col

        def handle_starttag(self, tag, attrs):
            if self.depth == 0:
                self.start = self.at()
            if tag in VOID:
                if self.depth == 0:
                    self.found.append(html[self.start : self.start + len(self.get_starttag_text())])
                return
            self.depth += 1

        def handle_startendtag(self, tag, attrs):
            if self.depth == 0:
                start = self.at()
                self.found.append(html[start : start + len(self.get_starttag_text())])

        def handle_endtag(self, tag):
            if tag in VOID:
                return
            self.depth -= 1
            if self.depth == 0:
                end = html.index(">", self.at()) + 1
                self.found.append(html[self.start : end])

    starts, pos = [], 0
    for line in html.split("\n"):
        starts.append(pos)
        pos += len(line) + 1
    parser = Top()
    parser.feed(html)
    parser.close()
    return parser.found


def opening(element: str) -> str:
    return element[: element.index(">") + 1]


def attr(element: str, name: str) -> str | None:
    found = re.search(rf'\s{name}="([^"]*)"', opening(element))
    return found.group(1) if found else None


def inner(element: str) -> str:
    return element[len(opening(element)) : element.rindex("<")]


def swap(page: str, message: str) -> str:
    """`page` after htmx applied the out-of-band fragments of one pushed message (and live.js's one rule: a "new"
    row the page already shows replaces that row)."""
    for element in top_elements(message):
        how = attr(element, "hx-swap-oob") or "true"
        element = re.sub(r'\s*hx-swap-oob="[^"]*"', "", element, count=1)
        if how == "true":
            target = attr(element, "id")
            if target and f'id="{target}"' in page:
                page = page.replace(outer_html(page, target), element, 1)
            continue
        where, _, target = how.partition(":#")
        old = outer_html(page, target)
        content = inner(element)
        first = top_elements(content)
        known = attr(first[0], "id") if first else None
        if known and f'id="{known}"' in page:
            page = page.replace(outer_html(page, known), first[0], 1)
        elif where == "beforeend":
            page = page.replace(old, old[: old.rindex("<")] + content + old[old.rindex("<") :], 1)
        elif where == "beforebegin":
            page = page.replace(old, content + old, 1)
        elif where == "afterbegin":
            page = page.replace(old, opening(old) + content + old[len(opening(old)) :], 1)
        else:
            raise AssertionError(f"a swap this page does not expect: {how}")
    return page


def words(page: str, part: str | None = None) -> str:
    """What a person reads in the page's main content (or one part of it): times as their moment, the reconnect
    notice left out, and the versions its controls act on."""
    html = outer_html(page, part) if part else re.search(r"<main>(.*)</main>", page, re.S).group(1)
    if 'id="live-notice"' in html:
        html = html.replace(outer_html(html, "live-notice"), "")
    html = CSRF.sub("", html)
    if part == "board-rows":
        # A pushed row is redrawn where it is; a reload orders rows by their last change. The rows' words are
        # compared, row by row; their order is not (the live board does not move a row it redraws).
        html = "".join(sorted(top_elements(inner(html))))
    versions = " ".join(f"[{k}={v}]" for k, v in VERSION.findall(html))
    html = TIME.sub(lambda m: f" [at {m.group(1)}] ", html)
    return visible_text(html) + " " + versions


def assert_same(where: str, live_page: str, reloaded: str, part: str | None = None) -> None:
    shown, fresh = words(live_page, part), words(reloaded, part)
    if shown != fresh:
        diff = "\n".join(
            difflib.unified_diff(
                re.split(r"(?<=[.:;—])\s+", fresh), re.split(r"(?<=[.:;—])\s+", shown), "reload", where, lineterm=""
            )
        )
        raise AssertionError(f"{where} does not say what a reload says:\n{diff}")


# --- open pages ---------------------------------------------------------------------------------------------


class Open:
    """A page drawn by the server, its socket opened the way live.js opens it, and every push applied."""

    def __init__(
        self, user, url: str, task_id: int, *, run_id: int | None = None, part: str | None = None, inbox=False
    ):
        self.user, self.url, self.part = user, url, part
        self.task_id, self.run_id, self.inbox = task_id, run_id, inbox

    async def reload(self) -> str:
        return await sync_to_async(page_html)(self.user, self.url)

    async def open(self) -> "Open":
        self.html = self.first = await self.reload()
        self.socket = await self.connect()
        # The page asks to be brought up to date; asking from one event back makes the answer certain, which
        # proves the socket is subscribed before the journey changes anything.
        await self.socket.send_json_to({"type": "resync", "last_event": self.cursor() - 1, "reconnect": False})
        await self.take(lambda m: cursor_of(m) >= 0)
        return self

    async def connect(self):
        path = re.search(r'ws-connect="([^"]+)"', self.html).group(1).replace("&amp;", "&")
        return await connect(path, self.user)

    def cursor(self) -> int:
        return int(re.search(r'id="live-cursor" data-last-event="(\d+)"', self.html).group(1))

    async def take(self, done, *, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            message = await self.socket.receive_from(timeout=max(0.01, deadline - time.monotonic()))
            self.html = swap(self.html, message)
            if done(message):
                return

    async def settle(self, quiet: float = 0.3) -> None:
        """Apply every push until the page's cursor reaches the last event it is told of (every event of its task
        on the task page and the board; those that name its run on a run page), then until nothing more arrives
        for a while (a lease line comes on the relay's re-check schedule, with no cursor)."""
        target = await database_sync_to_async(self.awaited)()
        deadline = time.monotonic() + 15
        while self.cursor() < target:
            left = deadline - time.monotonic()
            assert left > 0, f"{self.url}: no push up to event #{target} (the page is at #{self.cursor()})"
            self.html = swap(self.html, await self.socket.receive_from(timeout=left))
        while True:
            if await self.socket.receive_nothing(timeout=quiet):
                return
            self.html = swap(self.html, await self.socket.receive_from())

    def awaited(self) -> int:
        events = Event.objects.filter(task_id=self.task_id)
        if self.inbox:
            events = [x for x in events.only("id", "kind") if changes_inbox(x.kind)]
            return max((x.pk for x in events), default=0)
        if self.run_id is not None:
            events = events.filter(Q(run_id=self.run_id) | Q(payload__continues=self.run_id))
        return events.aggregate(m=Max("id"))["m"] or 0

    async def reconnected(self) -> str:
        """The page as first drawn, after a reconnect: its socket closed, a new one asks for every card again."""
        socket = await self.connect()
        try:
            await socket.send_json_to({"type": "resync", "last_event": self.cursor_of(self.first), "reconnect": True})
            html = self.first
            while True:
                message = await socket.receive_from(timeout=5)
                html = swap(html, message)
                if 'id="live-notice"' in message:
                    return html
        finally:
            await socket.disconnect()

    @staticmethod
    def cursor_of(html: str) -> int:
        return int(re.search(r'id="live-cursor" data-last-event="(\d+)"', html).group(1))

    async def check(self, step: str) -> None:
        await self.settle()
        reloaded = await self.reload()
        assert_same(f"{self.url} live after {step}", self.html, reloaded, self.part)
        assert_same(f"{self.url} reconnected after {step}", await self.reconnected(), reloaded, self.part)

    async def close(self) -> None:
        await self.socket.disconnect()


class Journey:
    """A task page, its first run's page, the board and the inbox, open and live while the engine moves the task
    on."""

    def __init__(self, user, task: Task):
        self.user, self.task = user, task
        self.pages: list[Open] = []

    async def __aenter__(self) -> "Journey":
        task, run = await database_sync_to_async(self._first)()
        pages = [
            Open(self.user, f"/tasks/{task.pk}/", task.pk),
            Open(self.user, "/?state=all", task.pk, part="board-rows"),
            Open(self.user, "/inbox/", task.pk, part="inbox-list", inbox=True),
        ]
        if run is not None:
            pages.append(Open(self.user, f"/agents/{run.agent.name}/runs/{run.pk}/", task.pk, run_id=run.pk))
        for page in pages:
            self.pages.append(await page.open())
        return self

    def _first(self):
        return self.task, Run.objects.filter(task=self.task).select_related("agent").order_by("id").first()

    async def __aexit__(self, *exc) -> None:
        for page in self.pages:
            await page.close()

    async def step(self, name: str, change, *args, **kwargs):
        result = await database_sync_to_async(change)(*args, **kwargs)
        for page in self.pages:
            await page.check(name)
        return result

    def page(self, url_part: str) -> str:
        return next(p.html for p in self.pages if url_part in p.url)


def heartbeat(run: Run) -> None:
    run.refresh_from_db()
    run_heartbeat(worker=run.lease_worker, run_id=run.pk, epoch=run.lease_epoch)


def ack(run: Run) -> None:
    run.refresh_from_db()
    ids = list(Message.objects.filter(run=run).values_list("pk", flat=True))
    messages_ack(worker=run.lease_worker, run_id=run.pk, epoch=run.lease_epoch, ids=ids)


def fresh(action: RecoveryAction) -> RecoveryAction:
    action.refresh_from_db()
    return action


def latest(task: Task) -> Run:
    return Run.objects.filter(task=task).order_by("-id").first()


# --- journeys -----------------------------------------------------------------------------------------------


async def test_a_run_from_queued_to_done_with_heartbeats_a_stop_and_follow_ups(org, agent, operator):
    """Queued, claimed with no heartbeat yet, heartbeats (no event: the lease line is pushed on the relay's
    schedule), follow-ups waiting, admitted, handed over and read, stopping, stopped by a person, done, closed,
    reopened, not delivered and delivered again."""
    task = await database_sync_to_async(e.start)(org, [e.SAFE, e.SAFE, e.SAFE])
    run = await database_sync_to_async(e.first_run)(task)
    async with Journey(operator, task) as j:
        run = await j.step("a claim", e.claim, run)
        assert "no heartbeat yet" in j.page("/tasks/")
        await j.step("a heartbeat", heartbeat, run)
        assert "last heartbeat" in j.page("/tasks/") and "no heartbeat yet" not in j.page("/tasks/")
        await j.step("a follow-up while the run works", message_save, user=operator, task=task, body="also a summary")
        await j.step("a step", e.do_step, run, 1)
        await j.step("a stop", run_request_stop, actor=operator, run=run)
        await j.step("the stop's receipt", e.finish, run, "stopped")
        await j.step("the supervisor's pass", supervise_once)
        cont = await database_sync_to_async(latest)(task)
        cont = await j.step("the continuation's claim", e.claim, cont)
        await j.step("the follow-up read", ack, cont)
        await j.step("its steps", e.advance, cont, 3)
        await j.step("the continuation's end", e.finish, cont)
        await j.step("a reopen", task_reopen, user=operator, task_id=task.pk, reason="one more pass")
        await j.step("another follow-up", message_save, user=operator, task=task, body="and the index")
        await j.step("a close", task_close, user=operator, task_id=task.pk, resolution="done", reason="enough")
        assert "Send follow-up" not in j.page("/tasks/")


async def test_an_unknown_outcome_decided_retried_and_continued(org, agent, operator):
    """Needs decision, unresolved, decision recorded (queued), continuing, continued; a step marked performed."""
    action = await database_sync_to_async(e.parked)(org, [e.SAFE, e.WRITE, e.SAFE], 2)
    task = await database_sync_to_async(Task.objects.get)(pk=action.task_id)
    async with Journey(operator, task) as j:

        def decide(outcome, note):
            a = fresh(action)
            return action_decide(
                action_id=a.pk, user=operator, version=a.version, outcome=outcome, note=note, accept_duplicate_risk=True
            )

        await j.step("an unresolved decision", decide, "unresolved", "asked the vendor")
        await j.step("a decision", decide, "performed", "report.md is on disk")
        cont = await database_sync_to_async(latest)(task)
        cont = await j.step("the continuation's claim", e.claim, cont)
        await j.step("its steps", e.advance, cont, 3)
        await j.step("its end", e.finish, cont)


async def test_a_retry_an_interrupted_continuation_an_exhausted_action_and_its_cancel(org, operator, admin_user):
    """Safe to continue (auto-resume off), retry requested, continuing, interrupted again, exhausted, cancelled,
    Continue now refused by the bound, a fresh start."""
    await database_sync_to_async(make_agent)(org, "careful", auto_resume=False)
    run = await database_sync_to_async(e.interrupted)(org, [e.SAFE, e.SAFE, e.SAFE], 2, agent="careful")
    task = await database_sync_to_async(Task.objects.get)(pk=run.task_id)
    async with Journey(operator, task) as j:
        await j.step("the supervisor's pass", supervise_once)
        action = await database_sync_to_async(RecoveryAction.objects.get)(run=run)

        def retry():
            a = fresh(action)
            return action_retry(action_id=a.pk, user=operator, version=a.version)

        attempt = await j.step("a retry", retry)
        cont = await database_sync_to_async(lambda: Run.objects.get(pk=attempt.continuation_run_id))()
        await j.step("its claim, its steps and its cut-off", e.crash_after_dispatch, cont, 2)
        await j.step("the next pass", supervise_once)

        def cancel_live():
            a = RecoveryAction.objects.filter(task=task, status__in=("open", "exhausted")).order_by("-id").first()
            return action_cancel(action_id=a.pk, user=operator, version=a.version)

        await j.step("a cancel", cancel_live)

        def continue_now():
            try:
                return task_continue(user=operator, task_id=task.pk)
            except Exception as exc:  # a refusal is an answer too; the pages must agree either way
                return exc

        await j.step("Continue now", continue_now)
        await j.step("the next pass", supervise_once)
        await j.step("a fresh start", task_start_over, task_id=task.pk, user=admin_user, accept_duplicate_risk=True)


async def test_a_pause_and_a_resume_of_a_queued_run(org, agent, operator):
    task = await database_sync_to_async(e.start)(org, [e.SAFE])
    async with Journey(operator, task) as j:
        await j.step("a pause", task_pause, actor=operator, task=task)
        await j.step("a follow-up while paused", message_save, user=operator, task=task, body="when you can")
        await j.step("a resume", task_resume, actor=operator, task=task)
        run = await j.step("a claim", e.claim, await database_sync_to_async(latest)(task))
        await j.step("its step", e.advance, run, 1)
        await j.step("the end", e.finish, run)


WORKSPACE_PLAN = [
    ("file_write", {"path": "draft.md", "content": "first draft\n"}),
    ("sleep", {"seconds": 0}),
    ("file_write", {"path": "draft.md", "content": "final\n"}),
]


async def test_a_workspace_repair_leaves_the_card_and_the_panel_saying_the_same(org, agent, admin_user):
    """Workspace changed (2 files differ), a reconcile that adopts one and holds the other, an isolated reissue:
    the card's evidence is the repair's reading, and every page that shows it is pushed again."""

    def diverge():
        task = e.start(org, WORKSPACE_PLAN)
        crash_at(e.first_run(task), 2)
        edit_by_hand(task, "draft.md", "first draft\nby hand\n")
        edit_by_hand(task, "todo.txt", "added\n")
        return task

    task = await database_sync_to_async(diverge)()
    async with Journey(admin_user, task) as j:
        await j.step("the supervisor's pass", supervise_once)
        action = await database_sync_to_async(validation_action)(task)
        card = visible_text(outer_html(j.page("/tasks/"), f"action-{action.pk}"))
        assert "Workspace changed — 2 files differ" in card

        def repair(name):
            a = fresh(action)
            return action_repair(action_id=a.pk, user=admin_user, version=a.version, repair=name, run=a.run_id)

        await j.step("a reconcile that holds a file", repair, "reconcile")
        page = j.page("/tasks/")
        card = visible_text(outer_html(page, f"action-{action.pk}"))
        assert "Workspace changed — 1 file differs" in card, card
        assert "todo.txt" not in card.split("Reconcile by")[0], card  # adopted: no longer listed as differing
        assert "adopts into the manifest the files only a person changed (none)" in card, card
        panel = visible_text(outer_html(page, f"workspace-{task.pk}"))
        assert "1 differ" in panel and "draft.md" in panel, panel
        await j.step("an isolated reissue", repair, "reissue")


# --- one item at a time -------------------------------------------------------------------------------------


async def test_a_page_that_reconnects_after_its_task_turned_done_no_longer_offers_send_follow_up(org, agent, operator):
    task = await database_sync_to_async(e.start)(org, [e.SAFE])
    page = await Open(operator, f"/tasks/{task.pk}/", task.pk).open()
    await page.close()  # the network drops; meanwhile the run does its work and the task is done
    run = await database_sync_to_async(e.claim)(await database_sync_to_async(latest)(task))
    await database_sync_to_async(e.advance)(run, 1)
    await database_sync_to_async(e.finish)(run)
    assert "Send follow-up" in page.first
    again = await page.reconnected()
    composer = visible_text(outer_html(again, f"composer-{task.pk}"))
    assert "Send follow-up" not in composer
    assert f"Task #{task.pk} is done: follow-ups are refused until an operator reopens it." in composer


def test_a_follow_up_sent_to_a_task_that_closed_meanwhile_is_refused_and_what_was_typed_stays_on_the_page(
    org, agent, operator
):
    from django.test import Client

    task = e.start(org, [e.SAFE])
    task_close(user=operator, task_id=task.pk, resolution="done", reason="enough")
    client = Client()
    client.force_login(operator)
    response = client.post(f"/tasks/{task.pk}/messages/", {"body": "one more <thing>"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 409
    html = response.content.decode()
    assert "Send follow-up" not in html
    kept = re.search(r"<form[^>]*data-kept[^>]*>.*?</form>", html, re.S).group(0)
    assert " hidden" not in opening(kept)
    assert "Not sent — what you wrote is kept here so you can copy it" in visible_text(kept)
    assert "one more &lt;thing&gt;</textarea>" in kept


def test_after_a_reconcile_that_holds_a_file_the_card_lists_what_still_differs_as_the_panel_does(
    org, agent, admin_user
):
    from django.test import Client

    task = e.start(org, WORKSPACE_PLAN)
    crash_at(e.first_run(task), 2)
    edit_by_hand(task, "draft.md", "first draft\nby hand\n")
    edit_by_hand(task, "todo.txt", "added\n")
    supervise_once()
    action = validation_action(task)
    action_repair(action_id=action.pk, user=admin_user, version=action.version, repair="reconcile", run=action.run_id)
    # What a push carries after the repair (the relay's own call for its event) and what a reload draws.
    pushed = task_update(task.pk, viewer=admin_user, run_ids=set(), new_run_ids=set(), kinds={"action_repaired"})
    client = Client()
    client.force_login(admin_user)
    page = client.get(f"/tasks/{task.pk}/").content.decode()
    for html in (pushed, page):
        card = visible_text(outer_html(html, f"action-{action.pk}"))
        before_result = card.split("Reconcile by")[0]
        assert "Workspace changed — 1 file differs" in before_result, card
        assert "todo.txt" not in before_result, card  # adopted: it no longer differs, and nothing offers to adopt it
        assert "adopts into the manifest the files only a person changed (none)" in card, card
        assert "2 files checked, 1 adopted into the manifest, 1 held (draft.md" in card, card  # the repair's result
        panel = visible_text(outer_html(html, f"workspace-{task.pk}"))
        assert "1 differ" in panel and "draft.md" in panel, panel
    assert words(pushed, f"action-{action.pk}") == words(page, f"action-{action.pk}")


BATCH = (
    "foreach",
    {"items": ["a", "b", "c"], "do": {"tool": "file_write", "args": {"path": "{{item}}", "content": "x"}}},
)


async def test_a_cut_off_batch_decided_item_by_item_and_resumed(org, agent, operator):
    """A cut-off batch (items reused, one of unknown outcome, the rest not started), its item's decision, the
    continuation that resumes it item by item with the item marked performed."""
    from tests.recovery.batch_scenarios import cut_batch

    task = await database_sync_to_async(e.start)(org, [BATCH])
    run = await database_sync_to_async(e.first_run)(task)
    async with Journey(operator, task) as j:
        run = await j.step("the batch cut off at item 2", cut_batch, run, 1)
        await j.step("the supervisor's pass", supervise_once)
        action = await database_sync_to_async(RecoveryAction.objects.get)(run=run)

        def decide():
            a = fresh(action)
            return action_decide(
                action_id=a.pk, user=operator, version=a.version, outcome="performed", note="b is there"
            )

        await j.step("the item's decision", decide)
        cont = await database_sync_to_async(latest)(task)
        await j.step("the continuation's claim", e.claim, cont)


async def test_an_agent_run_cut_off_handed_to_the_agent_and_continued(org, operator, api, runner):
    """An agent run (a prompt, model turns and tool calls, what it spent), cut off in a notify-mode call, handed
    to the agent to verify, its continuation claimed with the notice."""
    from tests.agents_api import Agent, prompt_task
    from tests.recovery.agent_scenarios import WRITE, history

    await database_sync_to_async(make_agent)(org, "coder")
    created = await database_sync_to_async(prompt_task)(api)
    task = await database_sync_to_async(Task.objects.get)(pk=created["id"])
    async with Journey(operator, task) as j:
        agent = await j.step("the agent's claim", Agent.claims, runner)
        await j.step("its turns and calls", history, agent)
        await j.step("a call cut off", agent.cut_off, 6, *WRITE)
        await j.step("the lapse", e.lapse)
        await j.step("the supervisor's pass", supervise_once)
        action = await database_sync_to_async(RecoveryAction.objects.get)(run_id=agent.run)

        def hand_over():
            a = fresh(action)
            return action_decide(
                action_id=a.pk, user=operator, version=a.version, outcome="agent_verifies", note="check the file"
            )

        await j.step("handed to the agent", hand_over)
        await j.step("the continuation's claim", Agent.claims, runner)


async def test_a_task_waiting_on_another_follows_it_when_the_other_is_done(org, agent, operator):
    """Held by a dependency (its own page says which task it waits on), then free when that task is done: the
    change is the other task's, and the waiting task's page and row follow it."""
    first = await database_sync_to_async(e.start)(org, [e.SAFE], title="first")
    task = await database_sync_to_async(e.start)(org, [e.SAFE], title="second")
    async with Journey(operator, task) as j:
        await j.step("a dependency", task_dependencies, user=operator, task_id=task.pk, add=[first.pk])
        assert f"#{first.pk}" in visible_text(outer_html(j.page("/tasks/"), f"task-{task.pk}"))
        run = await j.step("the other task's claim", e.claim, await database_sync_to_async(e.first_run)(first))
        await j.step("its step", e.advance, run, 1)
        await j.step("its end", e.finish, run)
