import threading

import pytest

from tasks.models import Run
from tasks.services import task_create
from tests.factories import make_agent, worker_token


@pytest.fixture
def coder(org):
    return make_agent(org, "coder")


@pytest.fixture
def token(org):
    return worker_token(org, "sdk")


@pytest.fixture
def console(daphne_server, token):
    from recovery_console import Console

    with Console(daphne_server.url, token, retry_seconds=10) as c:
        yield c


def agent_task(org, prompt="Write the notes.", *, agent="coder", title="agent task", **extra):
    task = task_create(org=org, actor="t", title=title, agent=agent, input={"prompt": prompt, **extra})
    return task, Run.objects.get(task=task)


class Serving:
    """`serve(console, agent, fn, once=True)` in a thread: the test drives the console meanwhile."""

    def __init__(self, console, agent, fn, **kwargs):
        from recovery_console import serve

        self.result = None
        self.error = None
        kwargs.setdefault("handle_signals", False)
        kwargs.setdefault("once", True)

        def target():
            try:
                self.result = serve(console, agent, fn, **kwargs)
            except BaseException as exc:  # handed to the test, not to the thread's excepthook
                self.error = exc

        self.thread = threading.Thread(target=target, name="serve")
        self.thread.start()

    def join(self, timeout=60):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "serve did not return"
        if self.error is not None:
            raise self.error
        return self.result


@pytest.fixture
def serving():
    return Serving
