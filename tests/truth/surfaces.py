"""Every place a phrase about a task can appear, as the words a person sees there.

A task page, each run page, its board row, its inbox row and the cards a live
push carries (rendered by `console.live.updates.task_update`, the relay's own call).
"""

import re
from dataclasses import dataclass, field

from django.test import Client

from console.live.updates import task_update
from tasks.models import Event, Run, Task
from tests.helpers import outer_html, visible_text

ISO = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}")


def sentences(html: str) -> str:
    """Visible words outside data blocks (`<pre>`: a tool's arguments and results are data, not sentences)."""
    return visible_text(re.sub(r"<pre\b.*?</pre>", " ", html, flags=re.S))


@dataclass
class Surfaces:
    task: str
    runs: dict[int, str]
    row: str
    inbox: str
    pushed: str
    cards: dict[str, str] = field(default_factory=dict)  # dom id -> text, on the task page
    prose: dict[str, str] = field(default_factory=dict)  # surface -> its sentences (no data blocks)

    def all(self) -> dict[str, str]:
        return {
            "task page": self.task,
            **{f"run page #{k}": v for k, v in self.runs.items()},
            "board row": self.row,
            "inbox row": self.inbox,
            "pushed cards": self.pushed,
        }

    def card(self, dom_id: str) -> str:
        return self.cards[dom_id]


def _get(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    return response.content.decode()


def _part(html: str, dom_id: str) -> str:
    return visible_text(outer_html(html, dom_id)) if f'id="{dom_id}"' in html else ""


def read(user, task_id: int) -> Surfaces:
    client = Client()
    client.force_login(user)
    task = Task.objects.select_related("agent").get(pk=task_id)
    page = _get(client, f"/tasks/{task_id}/")
    run_pages = {
        r.pk: _get(client, f"/agents/{r.agent.name}/runs/{r.pk}/")
        for r in Run.objects.filter(task_id=task_id).select_related("agent").order_by("id")
    }
    runs = {k: visible_text(v) for k, v in run_pages.items()}
    board = _get(client, "/?state=all")
    inbox = _get(client, "/inbox/")
    inbox_rows = re.findall(r'<li class="inbox-item[^"]*" id="inbox-action-\d+">.*?</li>', inbox, re.S)
    inbox_text = " ".join(visible_text(r) for r in inbox_rows if f"/tasks/{task_id}/" in r)
    kinds = set(Event.objects.filter(task_id=task_id).values_list("kind", flat=True))
    run_ids = set(Run.objects.filter(task_id=task_id).values_list("pk", flat=True))
    pushed = task_update(task_id, viewer=user, run_ids=run_ids, new_run_ids=set(), kinds=kinds)
    cards = {}
    for dom_id in re.findall(r'<(?:article|section) id="((?:action|run|task)-\d+)"', page):
        cards[dom_id] = _part(page, dom_id)
    assert task.pk
    prose = {"task page": sentences(page), "pushed cards": sentences(pushed), "inbox": sentences(inbox)}
    prose.update({f"run page #{k}": sentences(v) for k, v in run_pages.items()})
    prose["board"] = sentences(board)
    return Surfaces(
        prose=prose,
        task=visible_text(page),
        runs=runs,
        row=_part(board, f"task-{task_id}"),
        inbox=inbox_text,
        pushed=visible_text(pushed),
        cards=cards,
    )


def assert_no_iso(surfaces: Surfaces) -> None:
    for where, text in surfaces.prose.items():
        assert not ISO.search(text), f"a raw ISO time in the {where}: {ISO.search(text).group(0)!r} in {text[:300]!r}"
