"""One supervisor pass. `manage.py supervise` loops it; any number may run at once."""

import logging
from dataclasses import dataclass, field

from tasks.services import leases_expire

log = logging.getLogger("recovery.supervisor")


@dataclass
class PassReport:
    interrupted: list[int] = field(default_factory=list)
    stopped: list[int] = field(default_factory=list)

    def __bool__(self):
        return any(vars(self).values())


def supervise_once() -> PassReport:
    """Expire lapsed leases; then (next issue) classify, continue or open actions."""
    report = PassReport()
    for run in leases_expire():
        (report.interrupted if run.status == "interrupted" else report.stopped).append(run.pk)
    if report:
        log.info("supervisor pass: %s", report)
    return report
