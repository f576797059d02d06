"""`python manage.py worker [--once] [--concurrency N] [--label L]`: the reference worker.

Talks to the console only through the runner API at `CONSOLE_URL`, with the
worker token `CONSOLE_WORKER_TOKEN`; it never touches the database.

SIGTERM / SIGINT: stop claiming, let each slot's current step finish, stop
heartbeating and exit (unfinished runs lapse and the supervisor continues
them). A second signal exits at once.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from types import FrameType

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from tasks.worker.client import RunnerClient, RunnerError
from tasks.worker.faults import Faults
from tasks.worker.loop import default_label, run_forever

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

        shutdown = threading.Event()
        self._install_signal_handlers(shutdown)
        label = options["label"].strip() or default_label()
        log.info("worker %s: %d slot(s) against %s", label, options["concurrency"], settings.CONSOLE_URL)
        with RunnerClient(settings.CONSOLE_URL, token, timeout=30.0) as client:
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
                )
            except RunnerError as exc:
                raise CommandError(f"The worker could not claim runs: {exc}") from exc
        log.info("worker %s: exiting after %d run(s)", label, runs)

    @staticmethod
    def _install_signal_handlers(shutdown: threading.Event) -> None:
        def on_signal(signum: int, frame: FrameType | None) -> None:
            if shutdown.is_set():
                os._exit(128 + signum)
            log.info("%s: finishing the current step(s), then exiting", signal.Signals(signum).name)
            shutdown.set()

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, on_signal)
            signal.signal(signal.SIGINT, on_signal)
