"""The SDK's typed errors. Every one of them says what the console saved, not what the agent hoped.

- `LeaseLost`: the run is no longer this process's (a 409 `stale_lease`, or no renewal for a whole lease
  period). Nothing more is written for it; the console's supervisor recovers it from what was saved.
- `StopRequested`: a person's Stop, a pause or the budget asked the run to stop; raised at the next step
  boundary. Returning from the agent function after it finishes the run `stopped`.
- `ShuttingDown`: the worker process is draining (SIGTERM): raised at the next step boundary; the run is left
  to its lease (a worker going away is not a Stop).
- `Diverged`: on a continuation the agent asked for another call than the saved step of that number; the run
  was finished `failed` (`diverged`) with both calls, and nothing ran.
- `StepFailed`: a saved step that failed, replayed: its saved error, raised instead of calling the tool again.
- `Refused`: the console refused a request for a reason of its own (`code`, `detail`, the whole body).
- `Interrupted`: raised by a long call that gave up because `run.cancel` (or `run.abandon`) was set; its step
  records no outcome (it stays dispatched, and recovery treats it by its tool's mode).
- `ToolError`: raised by a call, its message is the step's saved error as it is.
- `RunFailed`: raised by an agent function to end its run `failed` with an error code of its choosing.
- `ConsoleUnavailable`: the console did not answer (transport errors, 502/503/504) within the time retries had.
"""

from __future__ import annotations

from typing import Any


class ConsoleError(Exception):
    """Base of every error the SDK raises about the console or the run."""


class LeaseLost(ConsoleError):
    def __init__(self, run: int | None = None, detail: str = "") -> None:
        self.run = run
        self.detail = detail
        super().__init__(f"run {run}: the lease is lost; nothing more is written for this run. {detail}".strip())


class StopRequested(ConsoleError):
    def __init__(self, run: int | None = None, seq: int | None = None, *, during: str | None = None) -> None:
        self.run = run
        self.seq = seq
        self.during = during  # the tool whose call the stop cut short, if it did
        super().__init__(f"run {run}: stop requested; {self.detail}")

    @property
    def detail(self) -> str:
        if self.seq is None:
            return "Stopped on request."
        if self.during:
            return f"Stopped on request during step {self.seq} ({self.during})."
        return f"Stopped on request before step {self.seq}."


class ShuttingDown(ConsoleError):
    def __init__(self, run: int | None = None, seq: int | None = None) -> None:
        self.run = run
        self.seq = seq
        super().__init__(f"run {run}: the worker is shutting down; the run is left to its lease")


class Diverged(ConsoleError):
    """`saved` and `asked` are `{"tool", "args"}` of step `seq`."""

    def __init__(self, seq: int, saved: dict, asked: dict) -> None:
        self.seq = seq
        self.saved = saved
        self.asked = asked
        super().__init__(
            f"step {seq}: the saved step is {saved.get('tool')!r} but the agent asked for {asked.get('tool')!r}"
            + (" with other arguments" if saved.get("tool") == asked.get("tool") else "")
            + "; the run is refused before anything runs"
        )


class StepFailed(ConsoleError):
    def __init__(self, error: str, *, seq: int | None = None, tool: str | None = None) -> None:
        self.error = error
        self.seq = seq
        self.tool = tool
        super().__init__(f"step {seq} ({tool}) failed: {error}" if seq is not None else error)


class Refused(ConsoleError):
    def __init__(self, code: str | None, detail: str = "", *, status: int = 0, body: Any = None) -> None:
        self.code = code
        self.detail = detail
        self.status = status
        self.body = body if body is not None else {}
        self.during: str | None = None  # which write of a step was refused: plan | dispatch | complete
        super().__init__(f"{status} {code}: {detail}".strip())

    @property
    def reason(self) -> str | None:
        """The body's `reason` (e.g. `stop_requested` on a refused dispatch), when the console names one."""
        return self.body.get("reason") if isinstance(self.body, dict) else None


class ConsoleUnavailable(ConsoleError):
    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__(f"the console did not answer: {detail}")


class Interrupted(ConsoleError):
    """A call cut short on purpose (a stop request, a lost lease, the worker's drain time): no outcome is saved."""


class ToolError(Exception):
    """Raise from a call to fail its step with exactly this message (other exceptions are saved as
    `"<ExceptionType>: <message>"`); `result`, if given, is saved with the failure (e.g. a batch's partial
    results)."""

    def __init__(self, message: str = "", *, result: Any = None) -> None:
        super().__init__(message)
        self.result = result


# What a step's call may not turn into a failed step: they end the run's work, not the call.


class RunFailed(ConsoleError):
    """Raise from an agent function to finish the run `failed` with `error_code` and `detail`."""

    def __init__(self, error_code: str, detail: str = "") -> None:
        self.error_code = error_code
        self.detail = detail
        super().__init__(f"{error_code}: {detail}" if detail else error_code)


# What a step's call may not turn into a failed step: they end the run's work, not the call (a step nested
# in the call ended it, or the agent gave up the run); the call records nothing either.
CONTROL = (LeaseLost, StopRequested, ShuttingDown, Diverged, RunFailed)
