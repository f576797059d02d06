"""The transition table of recovery actions (DESIGN §6), on the same machine as runs and tasks.

Every move bumps `version`, so a person acting on an older card is refused
(`stale_version`) and nothing relies on a lock its caller may not hold.
"""

from recovery.models import (
    ActionStatus,
    AttemptOutcome,
    BreakerState,
    BulkItem,
    BulkOperation,
    BulkResult,
    BulkStatus,
    DeliveryStatus,
    NotificationDelivery,
    RecoveryAction,
    RecoveryAttempt,
    RecoveryBreaker,
    Repair,
)
from tasks.transitions import Machine

A = ActionStatus

ACTIONS = Machine(
    RecoveryAction,
    {
        A.OPEN: frozenset({A.RETRYING, A.EXHAUSTED, A.RESOLVED, A.CANCELLED, A.RETIRED}),
        # retrying → open: the attempt was refused at admission (a gate closed before a worker started it).
        A.RETRYING: frozenset({A.RESOLVED, A.OPEN, A.CANCELLED, A.RETIRED}),
        # exhausted → retrying: an admin grants one more attempt, with a reason.
        A.EXHAUSTED: frozenset({A.RETRYING, A.CANCELLED, A.RETIRED}),
    },
    "recovery action",
    versioned=True,
)

B = BulkStatus

# A bulk operation (DESIGN §12): previewed → running → finished; cancelled from either (a discarded
# preview, or a stop midway: the items not reached yet are skipped, untouched).
BULK = Machine(
    BulkOperation,
    {
        B.PREVIEWED: frozenset({B.RUNNING, B.CANCELLED}),
        B.RUNNING: frozenset({B.FINISHED, B.CANCELLED}),
    },
    "bulk operation",
)

AO = AttemptOutcome
_RUN_ENDS = frozenset({AO.SUCCEEDED, AO.FAILED, AO.INTERRUPTED, AO.STOPPED})

# An attempt's outcome (recovery.actions.settle): requested (its continuation is queued) → continued (a worker
# started it) → how that run ended; or requested → rejected (it ended before any worker started it). A
# continuation claimed and ended within one settlement may go from requested straight to its end.
ATTEMPTS = Machine(
    RecoveryAttempt,
    {
        AO.REQUESTED: frozenset({AO.CONTINUED, AO.REJECTED, *_RUN_ENDS}),
        AO.CONTINUED: _RUN_ENDS,
    },
    "recovery attempt",
    field="outcome",
)

# A bulk item's result (recovery.bulk.operations): pending → applied | skipped | failed, written once.
BULK_ITEMS = Machine(
    BulkItem,
    {BulkResult.PENDING: frozenset({BulkResult.APPLIED, BulkResult.SKIPPED, BulkResult.FAILED})},
    "bulk item",
    field="result",
)

D = DeliveryStatus

# A notification delivery (recovery.notify): pending → delivered | failed | given_up; a failed try is tried again
# (failed → failed) until it is delivered or given up.
DELIVERIES = Machine(
    NotificationDelivery,
    {
        D.PENDING: frozenset({D.DELIVERED, D.FAILED, D.GIVEN_UP}),
        D.FAILED: frozenset({D.DELIVERED, D.FAILED, D.GIVEN_UP}),
    },
    "notification delivery",
)

BR = BreakerState

# A recovery breaker (DESIGN §14): open → half_open (after its cool-off) → closed (its trial continuation
# succeeded) or open again (it failed); an admin closes an open or half-open one with a reason.
BREAKERS = Machine(
    RecoveryBreaker,
    {
        BR.OPEN: frozenset({BR.HALF_OPEN, BR.CLOSED}),
        BR.HALF_OPEN: frozenset({BR.OPEN, BR.CLOSED}),
    },
    "recovery breaker",
    field="state",
)

# A repair job (DESIGN §9, workers anywhere): a repair of a workspace a worker holds, done by a worker holding it.
# queued → claimed (a worker of its label took it) → done | held (a reconcile that held files) | failed (the worker
# could not, or the action closed meanwhile); claimed → claimed: its claimer went silent and another took it over;
# queued → failed: the action closed before any worker took it. A repair done on the server is created final.
JOB_QUEUED, JOB_CLAIMED = "queued", "claimed"
JOB_PENDING = (JOB_QUEUED, JOB_CLAIMED)
REPAIRS = Machine(
    Repair,
    {
        JOB_QUEUED: frozenset({JOB_CLAIMED, "failed"}),
        JOB_CLAIMED: frozenset({JOB_CLAIMED, "done", "held", "failed"}),
    },
    "repair job",
)
