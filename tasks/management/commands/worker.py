"""`python manage.py worker [--once] [--concurrency N] [--label L]`: the reference worker.

Talks to the console only through the runner API at `CONSOLE_URL`, with the
worker token `CONSOLE_WORKER_TOKEN`; it never touches the database.

A person's Stop is seen in the next heartbeat; the tool running then may go on for the drain time less
its margin, then it is cut short (its step records no outcome) and the run finishes `stopped`.

SIGTERM / SIGINT: stop claiming and drain: each slot's current step may finish
within CONSOLE_WORKER_DRAIN_SECONDS (default 10); shortly before that a long
tool still running (`sleep`, `bash`) is abandoned, recording no outcome, and at
the drain time the process exits whatever is left. Unfinished runs keep their
lease until it lapses; the supervisor then recovers each by its steps' modes.
A second signal exits at once.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from types import FrameType

import httpx
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from tasks.worker.client import RunnerClient, RunnerError
from tasks.worker.faults import Faults
from tasks.worker.loop import default_label, run_forever
from tasks.worker.tools import stop_grace_for

log = logging.getLogger("tasks.worker")


class Command(BaseCommand):
    help = "Run the reference worker against the console's runner API."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--once", action="store_true", help="Claim at most one run per slot; exit when none is queued."
        )
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

    def handle(self, *args, **options) -> None:
        token = (settings.CONSOLE_WORKER_TOKEN or "").strip()
        if not token:
            raise CommandError(
                "CONSOLE_WORKER_TOKEN is empty: issue one with "
                "`python manage.py issue_token --worker <name> --org <slug>` and export it."
            )
        if options["concurrency"] < 1:
            raise CommandError("--concurrency must be at least 1.")
        try:
            faults = Faults.from_env()
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        if faults:
            log.warning("fault injection active: %s", os.environ.get("WORKER_FAULT"))

        shutdown, abandon = threading.Event(), threading.Event()
        self.signalled = self._install_signal_handlers(shutdown, abandon, float(settings.CONSOLE_WORKER_DRAIN_SECONDS))
        label = options["label"].strip() or default_label()
        if options["wait_for_server"] > 0:
            _wait_for_server(settings.CONSOLE_URL, options["wait_for_server"], shutdown)
        log.info("worker %s: %d slot(s) against %s", label, options["concurrency"], settings.CONSOLE_URL)
        with RunnerClient(settings.CONSOLE_URL, token, timeout=30.0, stopping=shutdown) as client:
            try:
                runs = run_forever(
                    client,
                    label,
                    options["concurrency"],
                    options["poll"],
                    once=options["once"],
                    heartbeat_seconds=settings.CONSOLE_HEARTBEAT_SECONDS,
                    lease_seconds=settings.CONSOLE_LEASE_SECONDS,
                    faults=faults,
                    shutdown=shutdown,
                    abandon=abandon,
                    stop_grace=stop_grace_for(settings.CONSOLE_WORKER_DRAIN_SECONDS),
                )
            except RunnerError as exc:
                raise CommandError(f"The worker could not claim runs: {exc}") from exc
        log.info("worker %s: exiting after %d run(s)", label, runs)
        if self.signalled.is_set():
            # Drained, and nothing is left to write (the worker talks HTTP, never to a
            # database): leave now instead of spending the drain time in interpreter teardown.
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)

    @staticmethod
    def _install_signal_handlers(shutdown: threading.Event, abandon: threading.Event, drain: float) -> threading.Event:
        """SIGTERM/SIGINT start the drain; a second one exits at once. Returns the event set by a signal."""
        signalled = threading.Event()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            name = signal.Signals(signum).name
            if signalled.is_set():
                log.warning("%s again: exiting at once", name)
                os._exit(128 + signum)
            signalled.set()
            log.info("%s: draining — the current step(s) may finish within %g s, then the worker exits", name, drain)
            shutdown.set()
            threading.Thread(target=_drain_deadline, args=(abandon, drain), name="drain", daemon=True).start()

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, on_signal)
            signal.signal(signal.SIGINT, on_signal)
        return signalled


def _drain_deadline(abandon: threading.Event, drain: float) -> None:
    """Abandon long tools a little before the drain time, then exit at it if anything still holds on."""
    grace = min(2.0, drain / 3)  # to unwind and exit once a tool gave up
    time.sleep(max(0.0, drain - grace))
    log.warning("drain time almost up: abandoning unfinished steps (they record no outcome)")
    abandon.set()
    time.sleep(grace)
    log.error("drain time (%g s) is up: exiting without waiting for the rest", drain)
    os._exit(1)


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
