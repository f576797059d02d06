import signal
import time

from django.conf import settings
from django.core.management.base import BaseCommand

from recovery.supervisor import supervise_once


class Command(BaseCommand):
    help = "Run the supervisor loop (--once: one pass, then exit)."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true")
        parser.add_argument("--interval", type=float, default=None)

    def handle(self, *args, once, interval, **options):
        if once:
            report = supervise_once()
            self.stdout.write(str(report))
            return
        interval = interval or settings.CONSOLE_SUPERVISE_SECONDS
        stopping = False

        def stop(*_):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        self.stdout.write(f"supervisor: one pass every {interval}s")
        while not stopping:
            supervise_once()
            deadline = time.monotonic() + interval
            while not stopping and time.monotonic() < deadline:
                time.sleep(0.1)
