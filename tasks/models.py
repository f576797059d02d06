"""The execution domain: who runs what, and the checkpoints of every step.

State fields change only through service functions (tasks/services.py); the
constraints below are the rules that must hold even if a service is wrong.
"""

import hashlib
import secrets

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone


class Organization(models.Model):
    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)
    # Recovery limits an admin may set for the organization (DESIGN §14); null = the deployment's default
    # (CONSOLE_BREAKER_* and CONSOLE_DECISION_DEADLINE_SECONDS). Read by recovery.limits.
    breaker_tasks = models.PositiveIntegerField(null=True, blank=True)
    breaker_window_seconds = models.PositiveIntegerField(null=True, blank=True)
    breaker_cooloff_seconds = models.PositiveIntegerField(null=True, blank=True)
    decision_deadline_seconds = models.PositiveIntegerField(null=True, blank=True)

    def __str__(self):
        return self.slug


class Role(models.TextChoices):
    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"


ROLE_RANK = {Role.VIEWER: 0, Role.OPERATOR: 1, Role.ADMIN: 2}


class Membership(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "org"], name="membership_one_per_user_org"),
            models.CheckConstraint(condition=Q(role__in=Role.values), name="membership_role_valid"),
        ]

    def __str__(self):
        return f"{self.user} in {self.org} ({self.role})"

    def allows(self, role: str) -> bool:
        return ROLE_RANK[self.role] >= ROLE_RANK[role]


class Agent(models.Model):
    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="agents")
    name = models.SlugField(max_length=100)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["org", "name"], name="agent_name_unique_in_org")]

    def __str__(self):
        return self.name


class UnknownOutcome(models.TextChoices):
    """Who settles an unknown outcome of the agent's agent runs: a person, or the agent itself (told to verify)."""

    ASK_PERSON = "ask_person"
    TELL_AGENT = "tell_agent"


class AgentProfile(models.Model):
    agent = models.OneToOneField(Agent, on_delete=models.CASCADE, related_name="profile")
    auto_resume = models.BooleanField(default=True)
    # tool name -> "replay" | "notify" | "forget"; tools absent here use the defaults.
    tool_modes = models.JSONField(default=dict, blank=True)
    # The tools the agent's worker registered (tool name -> {"mode", "description"}); None until one registers.
    tool_catalogue = models.JSONField(null=True, blank=True)
    tools_registered_at = models.DateTimeField(null=True, blank=True)
    unknown_outcome = models.CharField(max_length=16, choices=UnknownOutcome.choices, default=UnknownOutcome.ASK_PERSON)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(unknown_outcome__in=UnknownOutcome.values), name="profile_unknown_outcome_valid"
            ),
        ]

    def __str__(self):
        return f"profile of {self.agent}"


class Worker(models.Model):
    """A runner identity. Authenticates with its own token; never a person."""

    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="workers")
    name = models.CharField(max_length=100)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["org", "name"], name="worker_name_unique_in_org")]

    is_authenticated = True
    is_anonymous = False

    def __str__(self):
        return f"worker {self.name}@{self.org}"


class ApiToken(models.Model):
    """One API token. Only the digest is stored; the key is shown once."""

    digest = models.CharField(max_length=64, unique=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE)
    worker = models.ForeignKey(Worker, null=True, blank=True, on_delete=models.CASCADE)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=(Q(user__isnull=False, worker__isnull=True) | Q(user__isnull=True, worker__isnull=False)),
                name="token_has_exactly_one_principal",
            )
        ]

    @staticmethod
    def hash(key: str) -> str:
        return hashlib.sha256(key.encode()).hexdigest()

    @staticmethod
    def new_key() -> str:
        return secrets.token_hex(20)


class TaskStatus(models.TextChoices):
    TODO = "todo"
    IN_PROGRESS = "in_progress"
    BLOCKED = "blocked"
    DONE = "done"
    CANCELLED = "cancelled"


class Task(models.Model):
    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="tasks")
    title = models.CharField(max_length=300)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="children")
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="tasks")
    creator = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="created_tasks"
    )
    status = models.CharField(max_length=16, choices=TaskStatus.choices, default=TaskStatus.TODO)
    paused = models.BooleanField(default=False)
    # 64-bit: a budget is a sum of every step's usage, which grows by itself.
    budget_limit = models.PositiveBigIntegerField(null=True, blank=True)
    budget_used = models.PositiveBigIntegerField(default=0)
    private = models.BooleanField(default=False)
    workspace = models.CharField(max_length=1000, blank=True)
    # Where a worker holds the workspace (workers anywhere, DESIGN §9): the label of the workers that serve it
    # (empty: the server's own directory, `workspace`), its key under their root, and the path the last of them
    # reported (the worker's path, shown as such; the server never opens it).
    workspace_label = models.CharField(max_length=100, blank=True)
    workspace_key = models.CharField(max_length=300, blank=True)
    workspace_root = models.CharField(max_length=1000, blank=True)
    export_destination = models.CharField(max_length=1000, blank=True)
    dependencies = models.ManyToManyField("self", symmetrical=False, blank=True, related_name="dependents")
    # Who closed the task (done / cancelled), when and why; cleared on reopen (the events keep the history).
    closed_by = models.CharField(max_length=150, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    close_reason = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [models.Index(fields=["org", "-updated_at", "-id"], name="task_org_recent")]
        constraints = [
            models.CheckConstraint(condition=Q(status__in=TaskStatus.values), name="task_status_valid"),
        ]

    def __str__(self):
        return f"#{self.pk} {self.title}"

    @property
    def budget_exhausted(self) -> bool:
        return self.budget_limit is not None and self.budget_used >= self.budget_limit


class RunStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    STOPPING = "stopping"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"
    INTERRUPTED = "interrupted"
    CANCELLED = "cancelled"


LIVE_RUN_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.STOPPING)
LEASED_RUN_STATUSES = (RunStatus.RUNNING, RunStatus.STOPPING)


def effective_continuation() -> Q:
    """A continuation that counts: still live, or actually started."""
    return Q(status__in=LIVE_RUN_STATUSES) | Q(started_at__isnull=False)


FINAL_RUN_STATUSES = (
    RunStatus.SUCCEEDED,
    RunStatus.FAILED,
    RunStatus.STOPPED,
    RunStatus.INTERRUPTED,
    RunStatus.CANCELLED,
)


class RunKind(models.TextChoices):
    """What a run's input is: a scripted plan of tool calls, or a prompt an AI agent works from (DESIGN §13)."""

    PLAN = "plan"
    AGENT = "agent"


class Run(models.Model):
    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="runs")
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="runs")
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="runs")
    continues = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="continuations")
    attempt = models.PositiveIntegerField(default=1)
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.QUEUED)
    error_code = models.CharField(max_length=64, blank=True)
    error_detail = models.TextField(blank=True)
    input = models.JSONField(default=dict)
    kind = models.CharField(max_length=8, choices=RunKind.choices, default=RunKind.PLAN)
    # What the agent returned when it finished (agent runs); in the stored payload form.
    output = models.JSONField(null=True, blank=True)
    # An agent run that took another path on replay: {"seq", "saved": {"tool", "args"}, "asked": {...}}.
    diverged = models.JSONField(null=True, blank=True)
    # Why the run was asked to stop: "stop" (a person), "paused", "budget".
    stop_reason = models.CharField(max_length=16, blank=True)
    stop_requested_by = models.CharField(max_length=150, blank=True)
    stop_requested_at = models.DateTimeField(null=True, blank=True)
    # How the stop was verified: {"by": "worker"|"lease_lapse"|"not_started", "epoch", "at"}.
    stop_receipt = models.JSONField(null=True, blank=True)
    # What a continuation carries besides reused steps: {"dropped": [{"seq", "reason"}], ...}.
    carry = models.JSONField(default=dict, blank=True)
    # Set when a checkpoint could not be saved whole: recovery is off for this run.
    recovery_disabled = models.CharField(max_length=200, blank=True)
    # The worker identity whose token holds the lease, and its instance label.
    lease_worker = models.ForeignKey(Worker, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_epoch = models.PositiveIntegerField(default=0)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # The holder's last lease renewal (a heartbeat is bookkeeping, not an Event).
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # The run's place in the queue: when its chain first joined it. A continuation keeps the place of the
    # run it continues, so recovery is claimed before work queued after its chain began (not starved by it).
    queued_since = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Set when retention purged the step payloads (args, results) of this run.
    checkpoint_purged_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["org", "status", "id"], name="run_org_status"),
            # The claim walks only queued runs, in queue order: already-claimed runs are not in this index.
            models.Index(fields=["org", "queued_since", "id"], condition=Q(status="queued"), name="run_queue"),
            models.Index(fields=["status", "lease_expires_at"], name="run_lease_expiry"),
            # Retention looks only at runs whose checkpoint is still kept.
            models.Index(
                fields=["finished_at"], condition=Q(checkpoint_purged_at__isnull=True), name="run_checkpoint_kept"
            ),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(status__in=RunStatus.values), name="run_status_valid"),
            models.CheckConstraint(condition=Q(kind__in=RunKind.values), name="run_kind_valid"),
            # One live execution per task: a continuation cannot be admitted
            # while another run of the task is queued, running or stopping.
            models.UniqueConstraint(
                fields=["task"], condition=Q(status__in=LIVE_RUN_STATUSES), name="run_one_live_per_task"
            ),
            # A leased run has exactly one holder and an expiry.
            models.CheckConstraint(
                condition=~Q(status__in=LEASED_RUN_STATUSES)
                | (~Q(lease_owner="") & Q(lease_expires_at__isnull=False) & Q(lease_epoch__gt=0)),
                name="run_leased_has_holder",
            ),
            models.CheckConstraint(
                condition=~Q(status=RunStatus.QUEUED) | Q(lease_expires_at__isnull=True),
                name="run_queued_has_no_lease",
            ),
            # A run is continued at most once. A continuation that never started
            # (cancelled, or stopped while still queued) does not count, so a
            # refused admission can be followed by another attempt.
            models.UniqueConstraint(
                fields=["continues"],
                condition=Q(continues__isnull=False) & (Q(status__in=LIVE_RUN_STATUSES) | Q(started_at__isnull=False)),
                name="run_continued_once",
            ),
        ]

    def __str__(self):
        return f"run #{self.pk} ({self.status})"


class StepPhase(models.TextChoices):
    PLANNED = "planned"
    DISPATCHED = "dispatched"
    COMPLETED = "completed"
    FAILED = "failed"


class RecoveryMode(models.TextChoices):
    REPLAY = "replay"
    NOTIFY = "notify"
    FORGET = "forget"


class Step(models.Model):
    # Every read of steps is by run (and seq): `step_one_per_run_seq` leads with run_id, so the foreign key
    # needs no index of its own (one index less to write per checkpoint).
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="steps", db_index=False)
    # 64-bit: nested calls are numbered parent_seq * 100000 + position, which passes 2**31 two levels down.
    seq = models.PositiveBigIntegerField()
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="children", db_index=False
    )
    parent_seq = models.PositiveBigIntegerField(null=True, blank=True)
    tool = models.CharField(max_length=100)
    args = models.JSONField(default=dict)
    recovery_mode = models.CharField(max_length=8, choices=RecoveryMode.choices)
    phase = models.CharField(max_length=12, choices=StepPhase.choices, default=StepPhase.PLANNED)
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    usage = models.PositiveBigIntegerField(default=0)
    # What the step reported beyond its units: a model turn's {"input_tokens", "output_tokens", "cost"?}.
    usage_detail = models.JSONField(null=True, blank=True)
    reused_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="reused_by", db_index=False
    )
    dispatch_epoch = models.PositiveIntegerField(null=True, blank=True)
    planned_at = models.DateTimeField()
    dispatched_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    # What the step's completion could not keep of the workspace files it changed, and why
    # (tasks.workspace.Recorded.notes); null when it changed none or kept them all.
    workspace_notes = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["run_id", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["run", "seq"], name="step_one_per_run_seq"),
            models.CheckConstraint(condition=Q(phase__in=StepPhase.values), name="step_phase_valid"),
            models.CheckConstraint(condition=Q(recovery_mode__in=RecoveryMode.values), name="step_mode_valid"),
            models.CheckConstraint(condition=Q(seq__gte=1), name="step_seq_positive"),
            # Phase order: nothing is dispatched before it was planned, nothing
            # completes before its dispatch was recorded.
            models.CheckConstraint(
                condition=(
                    Q(phase=StepPhase.PLANNED, dispatched_at__isnull=True, completed_at__isnull=True)
                    | Q(phase=StepPhase.DISPATCHED, dispatched_at__isnull=False, completed_at__isnull=True)
                    | Q(
                        phase__in=[StepPhase.COMPLETED, StepPhase.FAILED],
                        dispatched_at__isnull=False,
                        completed_at__isnull=False,
                    )
                ),
                name="step_phase_order",
            ),
            models.CheckConstraint(
                condition=Q(result__isnull=True) | Q(phase__in=[StepPhase.COMPLETED, StepPhase.FAILED]),
                name="step_result_only_when_done",
            ),
        ]
        # Only for a deletion's cascade (children) and SET_NULL (reused_by): partial, so the common step — top
        # level, not carried — writes no entry in either.
        indexes = [
            models.Index(fields=["parent"], condition=Q(parent__isnull=False), name="step_parent_set"),
            models.Index(fields=["reused_from"], condition=Q(reused_from__isnull=False), name="step_reused_from_set"),
        ]

    def __str__(self):
        return f"step {self.seq} {self.tool} ({self.phase})"


class MessageStatus(models.TextChoices):
    WAITING = "waiting"
    ADMITTED = "admitted"
    # Handed to its run at the claim; not yet acknowledged by the worker.
    DELIVERED = "delivered"
    # Acknowledged by the run it was handed to (`read_at`): only now has the agent had it.
    READ = "read"
    # The task was closed before the message was read: kept and shown, never silently dropped.
    NOT_DELIVERED = "not_delivered"


# A message handed to a run that then finished its work without acknowledging it is carried once more;
# after that second hand-over it stays delivered to the last run (the worker does not acknowledge follow-ups).
MAX_HANDOVERS_UNREAD = 2


class Message(models.Model):
    """A follow-up a person wrote on a task; read by exactly one run (its acknowledgement)."""

    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="messages")
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="messages")
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    body = models.TextField()
    status = models.CharField(max_length=16, choices=MessageStatus.choices, default=MessageStatus.WAITING)
    waiting_reason = models.CharField(max_length=200, blank=True)
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="messages")
    # How many runs it was handed to at their claim, and when the run that has it acknowledged reading it.
    handovers = models.PositiveSmallIntegerField(default=0)
    read_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.CheckConstraint(condition=Q(status__in=MessageStatus.values), name="message_status_valid"),
            models.CheckConstraint(
                condition=Q(status__in=(MessageStatus.WAITING, MessageStatus.NOT_DELIVERED)) | Q(run__isnull=False),
                name="message_admitted_has_run",
            ),
            models.CheckConstraint(
                condition=Q(status=MessageStatus.READ, read_at__isnull=False)
                | (~Q(status=MessageStatus.READ) & Q(read_at__isnull=True)),
                name="message_read_has_time",
            ),
        ]
        indexes = [models.Index(fields=["task", "status"], name="message_task_status")]


class Event(models.Model):
    """Append-only log: audit history, outbox for live updates, reconnect cursor."""

    id = models.BigAutoField(primary_key=True)
    # Indexed by `event_org_id` and `event_task_id` (which lead with them), not on their own: every
    # checkpoint writes an event, so each index is one more entry per step.
    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="events", db_index=False)
    task = models.ForeignKey(
        Task, null=True, blank=True, on_delete=models.CASCADE, related_name="events", db_index=False
    )
    # No query reads events by run, and the console never deletes a run (only a deletion's cascade would
    # look them up by run): no index.
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.CASCADE, related_name="events", db_index=False)
    kind = models.CharField(max_length=64)
    actor = models.CharField(max_length=150)
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [
            models.Index(fields=["org", "id"], name="event_org_id"),
            models.Index(fields=["task", "id"], name="event_task_id"),
            # Histories read one kind of an organization's events (e.g. settings changes).
            models.Index(fields=["org", "kind", "id"], name="event_org_kind_id"),
        ]

    def __str__(self):
        return f"event {self.pk} {self.kind}"


class IdempotencyRecord(models.Model):
    """The first response to a mutation carrying an Idempotency-Key.

    A response may hold what retention purges (a claim's saved results and follow-ups, a run's steps), so
    records expire with the checkpoint retention (recovery/supervisor/retention.py), and the records of a run go
    when its checkpoint is purged, whichever comes first.
    """

    principal = models.CharField(max_length=200)
    key = models.CharField(max_length=200)
    fingerprint = models.CharField(max_length=64)
    status_code = models.PositiveSmallIntegerField()
    response = models.JSONField(null=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # The run the response is about (a runner write, a claim, a stop), whose purge takes the record with it.
    run = models.ForeignKey("Run", null=True, blank=True, on_delete=models.CASCADE, related_name="+")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["principal", "key"], name="idempotency_key_unique")]
        indexes = [models.Index(fields=["created_at"], name="idempotency_created")]


class WorkerInstance(models.Model):
    """One process (or slot) of a worker identity, as seen by the runner API: its claims and heartbeats.

    Written with one UPDATE per heartbeat and one upsert per claim (tasks/worker_instances.py);
    never an Event: being alive is bookkeeping, not a state change of any task.
    """

    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="worker_instances")
    worker = models.ForeignKey(Worker, on_delete=models.CASCADE, related_name="instances")
    # The label the worker claims with (`<host>-<pid>-<slot>` for the reference worker).
    instance = models.CharField(max_length=100)
    first_seen_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    last_claim_at = models.DateTimeField(null=True, blank=True)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["org", "-last_seen_at"], name="worker_instance_org_seen")]
        constraints = [
            models.UniqueConstraint(fields=["worker", "instance"], name="worker_instance_unique"),
        ]

    def __str__(self):
        return f"{self.worker.name}/{self.instance}"


# A continuation refused at admission because the workspace no longer matches its manifest:
# the run is created and ends `failed` with this code before any worker starts it.
WORKSPACE_VALIDATION_FAILED = "workspace_validation_failed"


def refused_at_admission() -> Q:
    """Runs refused before they started (workspace validation): they continue nothing and supersede nothing."""
    return Q(status=RunStatus.FAILED, started_at__isnull=True, error_code=WORKSPACE_VALIDATION_FAILED)


class WorkspaceReport(models.Model):
    """What a worker holding a task's workspace reported of it: a step's files, a validation before a
    continuation, a repair's result. The task page and `GET /api/tasks/{id}/workspace/` answer from the last one,
    with its time and worker: the server never reads that disk itself."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="workspace_reports")
    run = models.ForeignKey("Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    kind = models.CharField(max_length=12)  # "step", "validation", "repair"
    worker = models.CharField(max_length=200)  # the worker's name and instance label
    label = models.CharField(max_length=100, blank=True)
    root = models.CharField(max_length=1000, blank=True)  # the workspace's path on the worker
    checked = models.PositiveIntegerField(default=0)
    complete = models.BooleanField(default=True)
    # Differences only: [{"path", "status", "recorded", "actual", "diff"?, "diff_note"?}]
    files = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["task_id", "id"]


class WorkspaceFile(models.Model):
    """One entry of a task's workspace manifest: what the checkpoints say is on disk.

    Written when the step that changed it completes (tasks.workspace.manifest_record),
    from what the server reads on disk, and by an admin's repair (`source` says
    which). `kind` is what the entry is: a regular file (size, times, sha256 —
    empty when its content was not read: `not_kept` says why), a symbolic link
    (`link`: its target in wire form, never followed), an empty directory, a
    FIFO, a socket or a device (`link`: its number). `kept` says whether a file's
    content is in the workspace store, so it can be diffed and rebuilt. `path` is
    the stored key (tasks.workspace.key_of): the path, or "/" and its escape form
    for a name that is not text.
    """

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="workspace_files")
    path = models.CharField(max_length=2000)
    kind = models.CharField(max_length=8, default="file")
    size = models.BigIntegerField()
    mtime_ns = models.BigIntegerField()
    # With the size and mtime, the identity a file is compared by before its content is read: a person can set
    # a file's mtime back, never its ctime. 0 when unknown (recorded before these were kept).
    ctime_ns = models.BigIntegerField(default=0)
    ino = models.BigIntegerField(default=0)
    sha256 = models.CharField(max_length=64, blank=True)
    link = models.JSONField(null=True, blank=True)
    kept = models.BooleanField(default=False)
    not_kept = models.CharField(max_length=32, blank=True)
    not_kept_detail = models.CharField(max_length=300, blank=True)
    # The step that wrote it (kept as numbers too: checkpoints are purged after 30 days).
    step = models.ForeignKey(Step, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    run_id_seen = models.PositiveBigIntegerField(null=True, blank=True)
    seq = models.PositiveBigIntegerField(null=True, blank=True)
    tool = models.CharField(max_length=100, blank=True)
    # "step" (a completed step), "decision" (a step a person declared performed), "reconcile" (adopted by an
    # admin's repair), "baseline" (in the workspace when its chain's first run was claimed).
    source = models.CharField(max_length=16, default="step")
    recorded_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["task_id", "path"]
        constraints = [models.UniqueConstraint(fields=["task", "path"], name="workspace_file_one_per_path")]

    def __str__(self):
        return f"{self.path} of task #{self.task_id}"


class ExportRoot(models.Model):
    """A directory under which an organization's tasks may export (DESIGN §9), chosen by one of its admins.

    An organization has none until an admin adds one, so by default no task may export anywhere. Every root lies
    inside the deployment's export area (`CONSOLE_EXPORTS`) and never overlaps another organization's root
    (tasks/export_roots.py checks both when a root is added and again at every export).
    """

    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="export_roots")
    path = models.CharField(max_length=1000)
    added_by = models.CharField(max_length=150)
    reason = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["org_id", "path"]
        constraints = [models.UniqueConstraint(fields=["path"], name="export_root_path_unique")]

    def __str__(self):
        return f"{self.path} ({self.org})"
