"""Many tasks waiting on the same decision, made through the real services (claim, checkpoint, lapse, supervise)."""

from recovery.models import RecoveryAction
from tasks.services import task_create
from tests.console.scenarios import WRITE_PLAN, checkpoint, claim, expire_leases_and_supervise


def unknown_outcomes(org, n: int, *, title: str = "post the invoice", agent: str = "builder") -> list[RecoveryAction]:
    """n tasks, each cut off after dispatching `file_write report.md` (step 2): n open unknown-outcome actions.

    One lapse and one supervisor pass for all of them, so building a few dozen stays fast.
    """
    tasks = []
    for i in range(n):
        task = task_create(org=org, actor="t", title=f"{title} {i + 1}", agent=agent, input=WRITE_PLAN)
        checkpoint(claim(task), 1)
        tasks.append(task)
    expire_leases_and_supervise()
    actions = list(RecoveryAction.objects.filter(task__in=tasks).order_by("task_id"))
    assert len(actions) == n and all(a.kind == "unknown_outcome" and a.status == "open" for a in actions)
    return actions
