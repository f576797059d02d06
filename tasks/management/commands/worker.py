"""`python manage.py worker [--once] [--concurrency N] [--label L]`: the reference worker.

The worker is the SDK's (`python -m recovery_console.worker`, sdk/): this command keeps its contract by
running that module in this process's place (`os.execve` with this interpreter), handing it CONSOLE_URL,
CONSOLE_WORKER_TOKEN and CONSOLE_WORKER_DRAIN_SECONDS as the settings read them. The console's own code never
imports the SDK: the worker talks to the console only through the runner API and never touches the database.

A person's Stop is seen in the next heartbeat; the tool running then may go on for the drain time less its
margin, then it is cut short (its step records no outcome) and the run finishes `stopped`.

SIGTERM / SIGINT: stop claiming and drain: each slot's current step may finish
within CONSOLE_WORKER_DRAIN_SECONDS (default 10); shortly before that a long
tool still running (`sleep`, `bash`) is abandoned, recording no outcome, and at
the drain time the process exits whatever is left. Unfinished runs keep their
lease until it lapses; the supervisor then recovers each by its steps' modes.
A second signal exits at once.
"""

from __future__ import annotations

import os
import sys

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

WORKER_MODULE = "recovery_console.worker"


class Command(BaseCommand):
    help = "Run the reference worker (the SDK's) against the console's runner API."

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
        argv = [sys.executable, "-m", WORKER_MODULE, "--concurrency", str(options["concurrency"])]
        argv += ["--poll", str(options["poll"]), "--wait-for-server", str(options["wait_for_server"])]
        if options["once"]:
            argv.append("--once")
        if options["label"].strip():
            argv += ["--label", options["label"].strip()]
        env = dict(os.environ)
        env.update(
            {
                "CONSOLE_URL": settings.CONSOLE_URL,
                "CONSOLE_WORKER_TOKEN": token,
                "CONSOLE_WORKER_DRAIN_SECONDS": str(settings.CONSOLE_WORKER_DRAIN_SECONDS),
            }
        )
        sys.stdout.flush()
        sys.stderr.flush()
        # The same process (pid, signals, exit status) becomes the SDK's worker: nothing of Django stays.
        os.execve(sys.executable, argv, env)  # noqa: S606 (argv is this interpreter and fixed flags)
