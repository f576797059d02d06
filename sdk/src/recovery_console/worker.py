"""`python -m recovery_console.worker [--once] [--concurrency N] [--label L]`: the reference worker.

It runs scripted plans (`kinds: ["plan"]`, any agent of the organization) with the reference tools, on the
SDK, against `CONSOLE_URL` with the worker token `CONSOLE_WORKER_TOKEN`; it never touches a database.
`manage.py worker` runs this module (the console's own code never imports the SDK).

A person's Stop is seen in the next heartbeat; the tool running then may go on for the drain time less its
margin, then it is cut short (its step records no outcome) and the run finishes `stopped`.

SIGTERM / SIGINT: stop claiming and drain — each slot's current step may finish within
CONSOLE_WORKER_DRAIN_SECONDS (default 10); shortly before that a long tool still running (`sleep`, `bash`)
is abandoned, recording no outcome, and at the drain time the process exits whatever is left. Unfinished runs
keep their lease until it lapses; the supervisor then recovers each by its steps' modes. A second signal
exits at once. `CONSOLE_WORKER_WORKSPACES` makes the worker hold its tasks' workspaces under that directory
(recovery_console.workspace). `WORKER_FAULT` injects crashes and hangs at step boundaries
(recovery_console.reference.faults).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time

import httpx

from recovery_console.client import Console
from recovery_console.errors import ConsoleUnavailable, Refused
from recovery_console.reference.agent import PlanAgent
from recovery_console.reference.faults import Faults
from recovery_console.reference.tools import stop_grace_for
from recovery_console.serve import serve
from recovery_console.workspace import Holder

log = logging.getLogger("recovery_console")


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="worker", description="Run the reference worker against the console.")
    parser.add_argument("--once", action="store_true", help="Claim at most one run per slot; exit when none is queued.")
    parser.add_argument("--concurrency", type=int, default=1, help="Runs executed at the same time (default 1).")
    parser.add_argument("--label", default="", help="Worker label (default <hostname>-<pid>); slots append -<n>.")
    parser.add_argument("--poll", type=float, default=2.0, help="Seconds between claims when nothing is queued.")
    parser.add_argument(
        "--wait-for-server",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="Wait up to this long for the console to answer before claiming (a web started alongside).",
    )
    return parser.parse_args(argv)


def _fail(message: str) -> int:
    sys.stderr.write(f"CommandError: {message}\n")
    return 1


def main(argv: list[str] | None = None) -> int:
    options = _arguments(argv)
    level = os.environ.get("LOG_LEVEL", "INFO")
    logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    url = os.environ.get("CONSOLE_URL") or "http://127.0.0.1:8000"
    token = (os.environ.get("CONSOLE_WORKER_TOKEN") or "").strip()
    if not token:
        return _fail(
            "CONSOLE_WORKER_TOKEN is empty: issue one with "
            "`python manage.py issue_token --worker <name> --org <slug>` and export it."
        )
    if options.concurrency < 1:
        return _fail("--concurrency must be at least 1.")
    try:
        faults = Faults.from_env()
    except ValueError as exc:
        return _fail(str(exc))
    if faults:
        log.warning("fault injection active: %s", os.environ.get("WORKER_FAULT"))
    drain = float(os.environ.get("CONSOLE_WORKER_DRAIN_SECONDS") or 10)
    holder = Holder.from_env()
    if holder is not None:
        log.info("holding workspaces under %s (label %s)", holder.root, holder.label)
    shutdown = threading.Event()
    if options.wait_for_server > 0:
        _wait_for_server(url, options.wait_for_server, shutdown)

    def boundary(point: str, seq: int, run) -> None:
        faults.check(point, seq, run.attempt, on_hang=run.hang)

    signalled = False
    with Console(url, token, timeout=30.0) as console:
        try:
            runs = serve(
                console,
                None,
                PlanAgent(stop_grace=stop_grace_for(drain)),
                kinds=["plan"],
                concurrency=options.concurrency,
                label=options.label,
                poll_seconds=options.poll,
                drain_seconds=drain,
                once=options.once,
                shutdown=shutdown,
                on_boundary=boundary if faults else None,
                holder=holder,
            )
        except (Refused, ConsoleUnavailable) as exc:
            return _fail(f"The worker could not claim runs: {exc}")
        signalled = shutdown.is_set()
    log.info("worker: exiting after %d run(s)", runs)
    if signalled:
        # Drained, and nothing is left to write (the worker talks HTTP, never to a database): leave now
        # instead of spending the drain time in interpreter teardown.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


def _wait_for_server(url: str, seconds: float, shutdown: threading.Event) -> None:
    """Poll the console's /healthz until it answers (any status), at most `seconds`."""
    deadline = time.monotonic() + seconds
    while not shutdown.is_set() and time.monotonic() < deadline:
        try:
            httpx.get(url.rstrip("/") + "/healthz", timeout=1.0)
            return
        except httpx.HTTPError:
            shutdown.wait(0.2)
    log.warning("the console at %s did not answer within %g s; claiming anyway", url, seconds)


if __name__ == "__main__":
    sys.exit(main())
