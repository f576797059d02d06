"""Listeners for a run's start and end, called inside the transaction that starts or ends it.

The recovery layer settles what depends on a run (an action resolved when its
continuation starts, an attempt's real outcome when that run ends) in the same
transaction as the fact that settles it, never on a later sweep. `tasks` may
not import `recovery`, so recovery registers its listeners here when its app is
ready (recovery/apps.py). This is an explicit list with one caller per fact,
not a signal bus: `started` is called by the claim, `ended` by every service
that moves a run to a final status.

`started` is told of runs that continue another (attempts create continuations:
a run that continues nothing settles nothing). PostgreSQL's claim in one
statement takes only runs that continue nothing, as a transaction of its own
(tasks.services `run_claim`): it has no listener to call, so it needs no
transaction around it. A continuation is always claimed in a transaction.
"""

from collections.abc import Callable

from tasks.models import Run

_started: list[Callable[[Run], None]] = []
_ended: list[Callable[[Run], None]] = []


def on_started(listener: Callable[[Run], None]) -> None:
    if listener not in _started:
        _started.append(listener)


def on_ended(listener: Callable[[Run], None]) -> None:
    if listener not in _ended:
        _ended.append(listener)


def run_started(run: Run) -> None:
    if run.continues_id is None:
        return
    for listener in _started:
        listener(run)


def run_ended(run: Run) -> None:
    for listener in _ended:
        listener(run)
