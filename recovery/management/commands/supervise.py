import signal
import time

from django.conf import settings
from django.core.management.base import BaseCommand

from recovery.passes import default_label, supervisor_stopped
from recovery.supervisor import supervise_once


class Command(BaseCommand):
    help = "Run the supervisor loop (--once: one pass, then exit)."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true")
        parser.add_argument("--interval", type=float, default=None)
        parser.add_argument("--label", default="", help="This process's name on the workers page (default host-pid).")

    def handle(self, *args, once, interval, label, **options):
        label = label.strip() or default_label()
        interval = interval or settings.CONSOLE_SUPERVISE_SECONDS
        if once:
            report = supervise_once(label=label, interval=interval)
            self.stdout.write(str(report))
            return
        stopping = False

        def stop(*_):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        self.stdout.write(f"supervisor {label}: one pass every {interval}s")
        while not stopping:
            supervise_once(label=label, interval=interval)
            deadline = time.monotonic() + interval
            while not stopping and time.monotonic() < deadline:
                time.sleep(0.1)
        supervisor_stopped(label=label)
        self.stdout.write(f"supervisor {label}: stopped")
