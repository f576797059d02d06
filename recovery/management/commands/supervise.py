import logging
import signal
import threading
import time

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import connection

from recovery.bulk.operations import bulk_advance
from recovery.supervisor.loop import duty_failed, supervise_once
from recovery.supervisor.passes import default_label, supervisor_stopped
from recovery.workspaces.exports import exports_run

# Between passes the loop looks for started bulk operations this often, and works on them for at most
# BULK_BUDGET seconds at a time, so a pass is never held up for long and an operation starts within a tick.
BULK_EVERY = 0.5
BULK_BUDGET = 2.0

log = logging.getLogger("recovery.supervisor.loop")


def bulk_turn(budget: float, label: str) -> None:
    """Work on started bulk operations; a failure there never stops the supervisor's own passes."""
    try:
        bulk_advance(budget=budget)
    except Exception:
        log.exception("bulk operations: this turn failed; the next one picks up where it stopped")
        duty_failed(label=label, duty="bulk")


def export_loop(label: str, interval: float, stopping: threading.Event) -> None:
    """Copy exports in a thread of their own: a large workspace takes as long as it takes without delaying the
    passes that recover every organization's runs. Claims keep two supervisors from copying one export."""
    while not stopping.is_set():
        try:
            exports_run(label=label)
        except Exception:
            log.exception("exports: this turn failed; the next one tries again")
            duty_failed(label=label, duty="exports_run")
        finally:
            connection.close()
        stopping.wait(interval)


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
            bulk_turn(BULK_BUDGET, label)
            self.stdout.write(str(report))
            return
        stopping = False
        exports_stop = threading.Event()

        def stop(*_):
            nonlocal stopping
            stopping = True
            exports_stop.set()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        self.stdout.write(f"supervisor {label}: one pass every {interval}s")
        exporter = threading.Thread(target=export_loop, args=(label, interval, exports_stop), name="exports")
        exporter.start()
        while not stopping:
            supervise_once(label=label, interval=interval, exports=False)
            deadline = time.monotonic() + interval
            next_bulk = 0.0
            while not stopping and time.monotonic() < deadline:
                if time.monotonic() >= next_bulk:
                    bulk_turn(min(BULK_BUDGET, max(0.0, deadline - time.monotonic())), label)
                    next_bulk = time.monotonic() + BULK_EVERY
                time.sleep(0.1)
        exporter.join()  # a copy under way is finished and recorded before the process leaves
        try:
            supervisor_stopped(label=label)
        except Exception:  # the database is gone as we leave: the workers page will call it silent instead
            log.exception("supervisor %s: could not record the stop", label)
        self.stdout.write(f"supervisor {label}: stopped")
