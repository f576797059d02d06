"""Shared test helpers: snapshots of persisted state, plans, claims."""

from tasks.models import Event, Run, Step, Task


def snapshot(run_id: int) -> dict:
    """Everything a runner write could change, for before/after comparison."""
    run = Run.objects.filter(pk=run_id).values().first()
    return {
        "run": run,
        "steps": list(Step.objects.filter(run_id=run_id).order_by("seq").values()),
        "events": Event.objects.count(),
        "task": Task.objects.filter(pk=run["task_id"]).values().first() if run else None,
    }


def plan(*steps) -> dict:
    return {"steps": [{"tool": t, "args": a} for t, a in steps]}


def create_task(api, title="t", agent="builder", steps=None, **extra):
    body = {"title": title, "agent": agent, "input": steps or plan(("sleep", {"seconds": 0})), **extra}
    response = api.post("/api/tasks/", body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def claim(runner, label="w1-a"):
    response = runner.post("/api/runner/claim/", {"worker": label}, format="json")
    assert response.status_code in (200, 204), response.content
    return response.json() if response.status_code == 200 else None


def visible_text(html: str) -> str:
    """The words a person sees in `html`: text nodes only (no attributes, no hidden inputs, no scripts)."""
    from html.parser import HTMLParser

    class Text(HTMLParser):
        def __init__(self):
            super().__init__()
            self.parts, self.skip = [], 0

        def handle_starttag(self, tag, attrs):
            if tag in ("script", "style", "template"):
                self.skip += 1

        def handle_endtag(self, tag):
            if tag in ("script", "style", "template") and self.skip:
                self.skip -= 1

        def handle_data(self, data):
            if not self.skip:
                self.parts.append(data)

    parser = Text()
    parser.feed(html)
    return " ".join(" ".join(parser.parts).split())


def outer_html(html: str, element_id: str) -> str:
    """The outer HTML of the element with `id="element_id"`, nesting of its own tag included."""
    import re

    start = re.search(rf'<(\w+)\b[^>]*\bid="{re.escape(element_id)}"[^>]*>', html)
    assert start, f"no element with id={element_id!r} in {html[:300]!r}"
    tag = start.group(1)
    depth, pos = 1, start.end()
    pattern = re.compile(rf"<(/?){tag}\b[^>]*>", re.I)
    while depth:
        m = pattern.search(html, pos)
        assert m, f"#{element_id} is never closed"
        depth += -1 if m.group(1) else 1
        pos = m.end()
    return html[start.start() : pos]
