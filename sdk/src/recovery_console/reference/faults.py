"""Fault injection for the reference worker (`WORKER_FAULT`), for demos and recovery tests (moved here from
`tasks/worker/faults.py`).

`WORKER_FAULT` is a comma-separated list of `kind:seq[@attempt]` items, e.g.
`crash_after_dispatch:3` or `crash_after_dispatch:3@1,hang_after_dispatch:5`.
With `@attempt` the fault fires only in a run whose `attempt` is that number,
so the continuation of a crashed run does not crash again.

A crash is a hard exit of the whole process (`os._exit`): no finish, no
cleanup, no flushing — exactly what a killed worker leaves behind. A hang stops
the heartbeat and sleeps forever, so the lease lapses while the process lives.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

CRASH_EXIT_CODE = 137  # what a SIGKILLed process reports

# kind → the boundary in the step loop where it fires
KINDS: dict[str, str] = {
    "crash_after_plan": "after_plan",
    "crash_after_dispatch": "after_dispatch",
    "crash_before_complete": "before_complete",
    "hang_after_dispatch": "after_dispatch",
    # Right after the claim, before its follow-ups are acknowledged (its seq is 1: before the first step).
    "crash_before_ack": "before_ack",
}
POINTS = frozenset(KINDS.values())


@dataclass(frozen=True)
class Fault:
    kind: str
    seq: int
    attempt: int | None = None

    @property
    def point(self) -> str:
        return KINDS[self.kind]

    @property
    def hangs(self) -> bool:
        return self.kind.startswith("hang_")

    def applies(self, point: str, seq: int, attempt: int | None) -> bool:
        return self.point == point and self.seq == seq and (self.attempt is None or self.attempt == attempt)


def _positive_int(text: str, what: str, item: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"WORKER_FAULT item {item!r}: {what} must be a positive integer")
    return int(text)


def parse_faults(spec: str | None) -> tuple[Fault, ...]:
    """Parse a `WORKER_FAULT` value; raises ValueError with a clear message on a bad item."""
    faults: list[Fault] = []
    for raw in (spec or "").split(","):
        item = raw.strip()
        if not item:
            continue
        kind, sep, rest = item.partition(":")
        kind = kind.strip()
        if kind not in KINDS:
            raise ValueError(f"WORKER_FAULT item {item!r}: unknown kind {kind!r} (known: {', '.join(sorted(KINDS))})")
        if not sep:
            raise ValueError(f"WORKER_FAULT item {item!r}: expected kind:seq")
        seq_text, at, attempt_text = rest.strip().partition("@")
        seq = _positive_int(seq_text.strip(), "seq", item)
        attempt = _positive_int(attempt_text.strip(), "attempt", item) if at else None
        faults.append(Fault(kind, seq, attempt))
    return tuple(faults)


def _hard_exit(code: int) -> None:
    # A real SIGKILL, as when the machine or an operator kills the process.
    os.kill(os.getpid(), signal.SIGKILL)
    os._exit(code)


def _sleep_forever() -> None:
    threading.Event().wait()


class Faults:
    """The configured faults; `check` is called at each step boundary and may not return."""

    def __init__(
        self,
        faults: tuple[Fault, ...] = (),
        *,
        exit: Callable[[int], None] = _hard_exit,
        sleep_forever: Callable[[], None] = _sleep_forever,
    ) -> None:
        self.faults = faults
        self._exit = exit
        self._sleep_forever = sleep_forever

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Faults:
        env = os.environ if environ is None else environ
        return cls(parse_faults(env.get("WORKER_FAULT")))

    def __bool__(self) -> bool:
        return bool(self.faults)

    def match(self, point: str, seq: int, attempt: int | None) -> Fault | None:
        if point not in POINTS:
            raise ValueError(f"unknown fault point {point!r}")
        return next((f for f in self.faults if f.applies(point, seq, attempt)), None)

    def check(self, point: str, seq: int, attempt: int | None, *, on_hang: Callable[[], None] | None = None) -> None:
        """Fire the fault configured for this boundary, if any.

        A crash exits the process at once; a hang calls `on_hang` (stop the
        heartbeat) and then never returns.
        """
        fault = self.match(point, seq, attempt)
        if fault is None:
            return
        # Unbuffered write: the one trace of the crash, without flushing anything else.
        _say(f"WORKER_FAULT {fault.kind}:{fault.seq} fired at step {seq} (attempt {attempt})\n")
        if fault.hangs:
            if on_hang is not None:
                on_hang()
            self._sleep_forever()
            return
        self._exit(CRASH_EXIT_CODE)


def _say(text: str) -> None:
    try:
        os.write(2, text.encode())
    except OSError:
        pass
