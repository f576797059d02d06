"""The recovery domain: actions attached to a source task and run, their attempts and repairs."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from tasks.models import Agent, Organization, Run, Task


class ActionKind(models.TextChoices):
    CONTINUATION = "continuation"
    UNKNOWN_OUTCOME = "unknown_outcome"
    WORKSPACE_VALIDATION = "workspace_validation"
    WORKSPACE_EXPORT = "workspace_export"
    # An agent asked, on replay, for another call than the one saved at that step: nothing ran.
    DIVERGED = "diverged"


class ActionStatus(models.TextChoices):
    OPEN = "open"
    RETRYING = "retrying"
    EXHAUSTED = "exhausted"
    RESOLVED = "resolved"
    RETIRED = "retired"
    CANCELLED = "cancelled"


LIVE_ACTION_STATUSES = (ActionStatus.OPEN, ActionStatus.RETRYING, ActionStatus.EXHAUSTED)


class RecoveryAction(models.Model):
    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="recovery_actions")
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="actions")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="actions")
    kind = models.CharField(max_length=24, choices=ActionKind.choices)
    status = models.CharField(max_length=12, choices=ActionStatus.choices, default=ActionStatus.OPEN)
    # A stable reason code (e.g. `unknown_outcome`, `interrupted_twice`) and its evidence.
    cause = models.CharField(max_length=64)
    evidence = models.JSONField(default=dict)
    # The step an unknown-outcome action is about.
    seq = models.PositiveBigIntegerField(null=True, blank=True)
    original_owner = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    # Who owns the next move: a role (`role:operator`, `role:admin`) or a person (`user:<name>`).
    recovery_owner = models.CharField(max_length=150, blank=True)
    repair_task = models.ForeignKey(Task, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    return_owner = models.CharField(max_length=150, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    max_attempts = models.PositiveIntegerField(default=2)
    due_at = models.DateTimeField(null=True, blank=True)
    # Why it is exhausted: `attempts_used`, `overdue`, or the diagnosis' cause (`interrupted_twice`, …).
    exhaustion = models.CharField(max_length=32, blank=True)
    # The last decision recorded on an unknown outcome (an `unresolved` one keeps the action open).
    decision = models.CharField(max_length=16, blank=True)
    decided_by = models.CharField(max_length=150, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_note = models.TextField(blank=True)
    # The gate that refused the last admission, kept so the card can say why.
    gate = models.CharField(max_length=32, blank=True)
    gate_detail = models.CharField(max_length=300, blank=True)
    version = models.PositiveIntegerField(default=1)
    resolution = models.CharField(max_length=32, blank=True)
    resolution_note = models.TextField(blank=True)
    closed_by = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["org", "status"], name="action_org_status"),
            # A page's "has an open / exhausted action" checks look up the actions of its own tasks only.
            models.Index(fields=["task", "status"], name="action_task_status"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["task", "kind", "run"],
                condition=Q(status__in=LIVE_ACTION_STATUSES),
                name="action_one_live_per_task_kind_run",
            ),
            models.CheckConstraint(condition=Q(kind__in=ActionKind.values), name="action_kind_valid"),
            models.CheckConstraint(condition=Q(status__in=ActionStatus.values), name="action_status_valid"),
            models.CheckConstraint(
                condition=Q(attempts__lte=models.F("max_attempts")), name="action_attempts_within_max"
            ),
        ]

    def __str__(self):
        return f"action #{self.pk} {self.kind} ({self.status})"

    @property
    def live(self) -> bool:
        return self.status in LIVE_ACTION_STATUSES


class AttemptOutcome(models.TextChoices):
    """requested (its run is queued) → continued (a worker started it) → the run's end; or rejected
    (the run ended before any worker started it)."""

    REQUESTED = "requested"
    CONTINUED = "continued"
    REJECTED = "rejected"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    STOPPED = "stopped"


class RecoveryAttempt(models.Model):
    action = models.ForeignKey(RecoveryAction, on_delete=models.CASCADE, related_name="attempt_history")
    number = models.PositiveIntegerField()
    requested_by = models.CharField(max_length=150)
    requested_at = models.DateTimeField()
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    continuation_run = models.OneToOneField(
        Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="recovery_attempt"
    )
    outcome = models.CharField(max_length=16, choices=AttemptOutcome.choices, default=AttemptOutcome.REQUESTED)
    rejected_gate = models.CharField(max_length=32, blank=True)
    rejected_detail = models.CharField(max_length=300, blank=True)
    accepted_duplicate_risk = models.BooleanField(default=False)
    decision = models.CharField(max_length=16, blank=True)
    note = models.TextField(blank=True)

    class Meta:
        ordering = ["action_id", "number"]
        constraints = [models.UniqueConstraint(fields=["action", "number"], name="attempt_number_unique")]


class RepairKind(models.TextChoices):
    RETRY_EXPORT = "retry_export"
    RECONCILE = "reconcile"
    REISSUE = "reissue"


class Repair(models.Model):
    action = models.ForeignKey(RecoveryAction, on_delete=models.CASCADE, related_name="repairs")
    repair = models.CharField(max_length=16, choices=RepairKind.choices)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    # "queued" (a repair job waiting for a worker holding the workspace), "claimed" (a worker is doing it),
    # then what it came to: "done", "held" (a reconcile that held files), "failed".
    status = models.CharField(max_length=12, default="requested")
    result = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    # A repair job (the workspace is on a worker): the label of the workers that may take it, who took it, when.
    label = models.CharField(max_length=100, blank=True)
    claimed_by = models.CharField(max_length=200, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)


class SupervisorProcess(models.Model):
    """One `manage.py supervise` process (or a `--once` caller): its cumulative pass counters.

    Updated once per pass. The counters reset when the process restarts, like any
    Prometheus counter of a restarted target; /metrics exports them per process.
    """

    label = models.CharField(max_length=200, unique=True)
    interval = models.FloatField()
    started_at = models.DateTimeField()
    last_pass_at = models.DateTimeField()
    # Set when the process stopped cleanly (SIGTERM, the end of the demo): not silent, just gone.
    stopped_at = models.DateTimeField(null=True, blank=True)
    last_duration = models.FloatField(default=0.0)
    passes = models.PositiveBigIntegerField(default=0)
    duration_sum = models.FloatField(default=0.0)
    # Cumulative counts of passes per histogram bucket (upper bound in seconds -> count).
    buckets = models.JSONField(default=dict)
    # Cumulative counts of duties that failed (duty name -> count): a pass survives a failing duty and goes on.
    errors = models.JSONField(default=dict)

    class Meta:
        indexes = [models.Index(fields=["-last_pass_at"], name="supervisor_last_pass")]

    def __str__(self):
        return f"supervisor {self.label}"


class SupervisorPass(models.Model):
    """A supervisor pass that changed something: when, how long, what it did per organization.

    `did` maps an organization id (as a string) to counts, e.g. {"3": {"interrupted": 1,
    "continued": 1}}, so a page shows each organization only its own share.
    """

    supervisor = models.ForeignKey(SupervisorProcess, on_delete=models.CASCADE, related_name="recorded_passes")
    started_at = models.DateTimeField()
    duration = models.FloatField()
    did = models.JSONField(default=dict)

    class Meta:
        indexes = [models.Index(fields=["-started_at"], name="supervisor_pass_started")]


class HeldCopy(models.Model):
    """A directory a repair kept instead of changing anything in it; never deleted, linked from the task.

    `reason`: "reconcile" (copies of files held because a person and the plan
    both change them), "reissue" (the whole old workspace, left where it was),
    "export" (destination files that an export replaced, kept first).
    """

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="held_copies")
    repair = models.ForeignKey(Repair, null=True, blank=True, on_delete=models.SET_NULL, related_name="held_copies")
    path = models.CharField(max_length=1000)
    reason = models.CharField(max_length=16)
    # [{"path", "sha256", "size", "why"}]: what was kept, and why.
    files = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["task_id", "id"]


class Export(models.Model):
    """One copy of a workspace to its task's export destination: after a run succeeded, or an admin's retry."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="exports")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="exports")
    destination = models.CharField(max_length=1000)
    ok = models.BooleanField()
    error = models.TextField(blank=True)
    # {"checked", "copied": [...], "unchanged": [...], "kept": [...], "skipped": [...]}
    result = models.JSONField(default=dict)
    repair = models.ForeignKey(Repair, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # When the copy began (re-set when a stalled copy is taken over) and when its outcome was recorded: the
    # supervisor claims an export in one short transaction, copies with nothing locked, records in another.
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    claimed_by = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["task_id", "id"]
        indexes = [models.Index(fields=["run"], condition=models.Q(finished_at__isnull=True), name="export_copying")]


# --- bulk triage (DESIGN §12) -------------------------------------------------------------


class BulkAction(models.TextChoices):
    RETRY = "retry"
    CANCEL = "cancel"
    PAUSE = "pause"
    RESUME = "resume"
    CONTINUE = "continue"
    DECIDE = "decide"


class BulkStatus(models.TextChoices):
    """previewed (the scope is frozen, nothing done) → running → finished; previewed | running → cancelled.

    A preview nobody executed before `expires_at` stays `previewed` and reads as expired: executing it is refused.
    """

    PREVIEWED = "previewed"
    RUNNING = "running"
    FINISHED = "finished"
    CANCELLED = "cancelled"


class BulkOperation(models.Model):
    """One action on a frozen scope of tasks: the exact ids (and what each looked like) a person previewed.

    Executed item by item by the supervisor (recovery/bulk/operations.py), each item through
    the service a single click uses. Its status moves only through
    `recovery.transitions.BULK`.
    """

    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="bulk_operations")
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    actor_name = models.CharField(max_length=150)
    action = models.CharField(max_length=16, choices=BulkAction.choices)
    # {"outcome", "note", "accept_duplicate_risk"}: one note and one consent for every item.
    params = models.JSONField(default=dict, blank=True)
    # What the person chose: {"ids": n} (by hand) or {"filter": {...}} (every task matching the board's filter).
    selection = models.JSONField(default=dict, blank=True)
    retry_of = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="retries")
    status = models.CharField(max_length=12, choices=BulkStatus.choices, default=BulkStatus.PREVIEWED)
    # The scope's size and, as predicted at the preview, how many would be refused and why (reason → count).
    count = models.PositiveIntegerField(default=0)
    refusals = models.JSONField(default=dict, blank=True)
    scope_hash = models.CharField(max_length=64)
    expires_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    cancelled_by = models.CharField(max_length=150, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["org", "-id"], name="bulk_org_recent"),
            models.Index(fields=["status", "started_at"], name="bulk_status_started"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(status__in=BulkStatus.values), name="bulk_status_valid"),
            models.CheckConstraint(condition=Q(action__in=BulkAction.values), name="bulk_action_valid"),
        ]

    def __str__(self):
        return f"bulk #{self.pk} {self.action} ({self.status})"


class BulkResult(models.TextChoices):
    PENDING = "", "pending"
    APPLIED = "applied"
    SKIPPED = "skipped"
    FAILED = "failed"


class BulkItem(models.Model):
    """One task of a frozen scope: what it looked like at the preview, and what executing did to it.

    `result` is written once (pending → applied | skipped | failed), by a
    compare-and-set in the transaction of the item's own change.
    """

    op = models.ForeignKey(BulkOperation, on_delete=models.CASCADE, related_name="items")
    position = models.PositiveIntegerField()
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="bulk_items")
    # The recovery action the item acts on (retry, decide, cancel) and its version at the preview.
    action = models.ForeignKey(RecoveryAction, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    version = models.PositiveIntegerField(null=True, blank=True)
    # The facts the preview saw (state, run, pause, target action): a difference at execution is "changed".
    seen = models.JSONField(default=dict)
    # "" when the preview expected it to apply; else the reason it expected a refusal.
    predicted = models.CharField(max_length=48, blank=True)
    result = models.CharField(max_length=8, choices=BulkResult.choices, blank=True, default=BulkResult.PENDING)
    reason = models.CharField(max_length=48, blank=True)
    detail = models.CharField(max_length=500, blank=True)
    # The run the item's change queued (a retry, a decision, Continue now).
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    done_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["op_id", "position"]
        indexes = [models.Index(fields=["op", "result", "position"], name="bulk_item_pending")]
        constraints = [
            models.UniqueConstraint(fields=["op", "task"], name="bulk_item_one_per_task"),
            models.UniqueConstraint(fields=["op", "position"], name="bulk_item_position_unique"),
            models.CheckConstraint(condition=Q(result__in=BulkResult.values), name="bulk_item_result_valid"),
        ]

    def __str__(self):
        return f"bulk #{self.op_id} item {self.position} (task #{self.task_id}: {self.result or 'pending'})"


class SavedView(models.Model):
    """A named board filter of one person (a preference: it changes nothing anyone else sees)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="saved_views")
    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=80)
    # The board's query parameters: state, q, agent, owner, tool, age, sort.
    params = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name", "id"]
        constraints = [models.UniqueConstraint(fields=["user", "org", "name"], name="saved_view_name_unique")]

    def __str__(self):
        return f"{self.name} ({self.user})"


# --- notifications and decision deadlines (DESIGN §14) ------------------------------------


class DestinationKind(models.TextChoices):
    WEBHOOK = "webhook"  # an HTTP POST signed as the Standard Webhooks scheme describes
    APPRISE = "apprise"  # chat and mail through the `apprise` library (its URL names the service)


# What a destination may ask to be told (API.md, "Power tools").
NOTICE_TYPES = ("decision_waiting", "exhausted", "repair_waiting", "breaker_opened", "deadline_passed")


class NotificationDestination(models.Model):
    """Where an organization's notices go, and which of them.

    `url` and `secret` are stored as given (the supervisor needs both to deliver and sign); neither is ever shown
    back after saving: pages and the API show `url` redacted (recovery.notify.redacted) and `secret` only in
    the answer that created it. After `CONSOLE_NOTIFY_FAILING_AFTER` deliveries in a row were given up,
    `failing_since` is set: the destination is shown failing and gets no new deliveries until an admin
    turns it on again.
    """

    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="notification_destinations")
    kind = models.CharField(max_length=8, choices=DestinationKind.choices)
    url = models.CharField(max_length=2000)
    secret = models.CharField(max_length=100)
    events = models.JSONField(default=list)
    enabled = models.BooleanField(default=True)
    # Deliveries given up in a row (a delivered one resets it), and since when it counts as failing.
    failures = models.PositiveIntegerField(default=0)
    failing_since = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    created_by = models.CharField(max_length=150)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["org_id", "id"]
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=DestinationKind.values), name="destination_kind_valid"),
        ]

    def __str__(self):
        return f"destination #{self.pk} {self.kind}"


class DeliveryStatus(models.TextChoices):
    """pending → delivered | failed (a try failed; another follows at `next_attempt_at`) | given_up;
    failed → delivered | failed | given_up."""

    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"
    GIVEN_UP = "given_up"


DELIVERY_DUE = (DeliveryStatus.PENDING, DeliveryStatus.FAILED)


class NotificationDelivery(models.Model):
    """One notice to one destination: the outbox row written in the transaction of the event it tells of.

    Unique per (destination, event): a notice is sent once per event. The supervisor claims a due row by moving
    `next_attempt_at` past the try (a compare-and-set on `attempts`), posts with nothing locked, and records the
    try in `tries` (`{"at", "status", "error"}`) with the delivery's move.
    """

    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    destination = models.ForeignKey(NotificationDestination, on_delete=models.CASCADE, related_name="deliveries")
    notice = models.CharField(max_length=20)
    event_id = models.BigIntegerField()
    task = models.ForeignKey(Task, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    payload = models.JSONField(default=dict)
    status = models.CharField(max_length=10, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    last_error = models.CharField(max_length=500, blank=True)
    tries = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["next_attempt_at"], condition=Q(status__in=DELIVERY_DUE), name="delivery_due"),
            models.Index(fields=["org", "-id"], name="delivery_org_recent"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["destination", "event_id"], name="delivery_once_per_event"),
            models.CheckConstraint(condition=Q(status__in=DeliveryStatus.values), name="delivery_status_valid"),
        ]

    def __str__(self):
        return f"delivery #{self.pk} {self.notice} ({self.status})"


class OverdueDecision(models.Model):
    """A waiting decision found past its organization's deadline: written once per action (the unique action
    settles two supervisors), in the transaction of its `decision_overdue` event. It decides nothing."""

    action = models.OneToOneField(RecoveryAction, on_delete=models.CASCADE, related_name="overdue")
    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    deadline_seconds = models.PositiveIntegerField()
    noticed_at = models.DateTimeField(auto_now_add=True)


# --- the recovery breaker (DESIGN §14) -----------------------------------------


class BreakerState(models.TextChoices):
    OPEN = "open"
    HALF_OPEN = "half_open"
    CLOSED = "closed"


BREAKER_IN_FORCE = (BreakerState.OPEN, BreakerState.HALF_OPEN)


class RecoveryFailure(models.Model):
    """One run whose recovery the supervisor opened, with its failure signature (recovery.rules.breaker):
    what the breaker counts. One per run, so a run held and looked at again is counted once."""

    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="+")
    run = models.OneToOneField(Run, on_delete=models.CASCADE, related_name="recovery_failure")
    signature = models.CharField(max_length=200)
    tool = models.CharField(max_length=100, blank=True)
    at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["org", "agent", "signature", "at"], name="failure_signature_at")]


class RecoveryBreaker(models.Model):
    """A breaker of (organization, agent, failure signature): open → half_open → closed | open again.

    While it is open or half-open (in force), no automatic continuation of its agent is created and a person's
    continuation is refused (gate `breaker_open`); half-open lets one trial continuation (`probe_run`) go.
    """

    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    signature = models.CharField(max_length=200)
    tool = models.CharField(max_length=100, blank=True)
    state = models.CharField(max_length=12, choices=BreakerState.choices, default=BreakerState.OPEN)
    # Distinct tasks of the agent with this signature since `first_at` (the window's start when it tripped).
    tasks = models.PositiveIntegerField(default=0)
    first_at = models.DateTimeField()
    last_at = models.DateTimeField()
    opened_at = models.DateTimeField()
    half_open_at = models.DateTimeField(null=True, blank=True)
    probe_run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    closed_at = models.DateTimeField(null=True, blank=True)
    closed_by = models.CharField(max_length=150, blank=True)
    reason = models.TextField(blank=True)

    class Meta:
        indexes = [models.Index(fields=["org", "state"], name="breaker_org_state")]
        constraints = [
            # Two supervisors tripping the same breaker at once make one: the second insert fails and reads it.
            models.UniqueConstraint(
                fields=["org", "agent", "signature"],
                condition=Q(state__in=BREAKER_IN_FORCE),
                name="breaker_one_in_force",
            ),
            models.CheckConstraint(condition=Q(state__in=BreakerState.values), name="breaker_state_valid"),
        ]

    def __str__(self):
        return f"breaker #{self.pk} {self.signature} ({self.state})"
