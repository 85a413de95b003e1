"""The data model: downstream backends, their level history, upstream deliveries,
dispatches, jobs (one row per attempt, keyed like upstream) and their failed tests.

Every idempotency rule is a database constraint, so concurrent duplicates are settled by
the database rather than by a read-then-write race.
"""

from django.conf import settings
from django.db import models
from django.db.models.functions import Lower


class Level(models.IntegerChoices):
    """Allowlist levels (CRCR.md, "Levels")."""

    L1 = 1, "L1"
    L2 = 2, "L2"
    L3 = 3, "L3"
    L4 = 4, "L4"

    @classmethod
    def parse(cls, text: str) -> "Level":
        """Turn "L3" (any case) into Level.L3; ValueError otherwise."""
        cleaned = (text or "").strip().upper()
        for level in cls:
            if level.label == cleaned:
                return level
        raise ValueError(f"unknown level {text!r}; expected one of L1, L2, L3, L4")


class Downstream(models.Model):
    """An out-of-tree backend repository and its effective level."""

    full_name = models.CharField(max_length=200, help_text="owner/repo as GitHub spells it")
    level = models.PositiveSmallIntegerField(choices=Level.choices, default=Level.L1)
    device = models.CharField(max_length=100, blank=True, help_text="L3 device label suffix")
    oncalls = models.JSONField(default=list, blank=True, help_text="GitHub logins")
    delisted = models.BooleanField(default=False, help_text="gone from the imported allowlist")
    pending_upstream = models.BooleanField(
        default=False, help_text="level approved here, not yet in an imported allowlist"
    )
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(Lower("full_name"), name="downstream_name_ci_unique"),
        ]
        ordering = ["full_name"]

    def __str__(self) -> str:
        return self.full_name

    @property
    def owner(self) -> str:
        """The organisation part of owner/repo."""
        return self.full_name.split("/", 1)[0]

    @property
    def repo(self) -> str:
        """The repository part of owner/repo."""
        return self.full_name.split("/", 1)[1]


class LevelChange(models.Model):
    """Append-only level history; `at` may be back-dated (imports, forwards)."""

    class Source(models.TextChoices):
        IMPORT = "import", "allowlist import"
        APPROVAL = "approval", "approved request"
        FORWARD = "forward", "learnt from a relay forward"
        ADMIN = "admin", "admin decision"

    downstream = models.ForeignKey(Downstream, on_delete=models.PROTECT, related_name="changes")
    from_level = models.PositiveSmallIntegerField(choices=Level.choices, null=True, blank=True)
    to_level = models.PositiveSmallIntegerField(
        choices=Level.choices, null=True, blank=True, help_text="null when delisted"
    )
    at = models.DateTimeField()
    recorded_at = models.DateTimeField()
    reason = models.TextField(blank=True)
    source = models.CharField(max_length=20, choices=Source.choices)
    by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    evidence = models.JSONField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["downstream", "at"])]
        ordering = ["downstream", "at", "id"]

    def __str__(self) -> str:
        before, after = self.from_level or "-", self.to_level or "-"
        return f"{self.downstream_id}: L{before} → L{after} at {self.at:%Y-%m-%d}"


class Delivery(models.Model):
    """An upstream webhook delivery (or a push/PR we dispatched)."""

    delivery_id = models.CharField(max_length=100, unique=True)
    event_type = models.CharField(max_length=40)
    upstream_repo = models.CharField(max_length=200)
    action = models.CharField(max_length=40, blank=True)
    pr_number = models.PositiveBigIntegerField(default=0)
    pr_title = models.CharField(max_length=300, blank=True)
    pr_author = models.CharField(
        max_length=100, blank=True, help_text="pull_request.user.login (kept after pruning)"
    )
    head_sha = models.CharField(max_length=64, blank=True)
    base_sha = models.CharField(max_length=64, blank=True)
    base_ref = models.CharField(max_length=255, blank=True)
    ref = models.CharField(max_length=255, blank=True)
    labels = models.JSONField(default=list, blank=True)
    received_at = models.DateTimeField()
    body_sha256 = models.CharField(max_length=64, unique=True)
    payload = models.JSONField(null=True, blank=True, help_text="raw body; pruned by retention")

    class Meta:
        indexes = [
            models.Index(fields=["head_sha"]),
            models.Index(fields=["pr_number", "received_at"]),
            models.Index(fields=["event_type", "ref", "received_at"]),
        ]

    def __str__(self) -> str:
        return self.delivery_id


class Dispatch(models.Model):
    """One repository_dispatch of a delivery to a downstream."""

    class Outcome(models.TextChoices):
        PENDING = "pending", "pending"
        SENT = "sent", "sent"
        FAILED = "failed", "failed"
        NOT_INSTALLED = "not_installed", "app not installed"

    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="dispatches")
    downstream = models.ForeignKey(Downstream, on_delete=models.PROTECT, related_name="dispatches")
    level_at_dispatch = models.PositiveSmallIntegerField(choices=Level.choices)
    created_at = models.DateTimeField()
    dispatched_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=20, choices=Outcome.choices, default=Outcome.PENDING)
    reason = models.TextField(blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    trimmed_fields = models.JSONField(default=list, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["delivery", "downstream"], name="dispatch_delivery_downstream_unique"
            ),
        ]
        indexes = [models.Index(fields=["downstream", "created_at"])]

    def __str__(self) -> str:
        return f"{self.delivery_id} → {self.downstream_id}: {self.outcome}"


class Job(models.Model):
    """One attempt of one downstream job, keyed by upstream's row key."""

    class Status(models.TextChoices):
        IN_PROGRESS = "in_progress", "in progress"
        COMPLETED = "completed", "completed"

    class Conclusion(models.TextChoices):
        SUCCESS = "success", "success"
        FAILURE = "failure", "failure"
        CANCELLED = "cancelled", "cancelled"
        TIMED_OUT = "timed_out", "timed out"
        SKIPPED = "skipped", "skipped"
        NEUTRAL = "neutral", "neutral"

    class TimingSource(models.TextChoices):
        SERVER = "server", "measured by this server"
        FORWARD = "forward", "relay forward (trusted.ci_metrics)"
        NONE = "none", "unknown"

    class Source(models.TextChoices):
        CALLBACK = "callback", "OIDC callback"
        FORWARD = "forward", "relay forward"
        IMPORT = "import", "history import"

    # Row key (CRCR.md, "Identity").
    downstream = models.ForeignKey(Downstream, on_delete=models.PROTECT, related_name="jobs")
    delivery_id = models.CharField(max_length=100)
    workflow_name = models.CharField(max_length=255)
    job_name = models.CharField(max_length=255)
    check_run_id = models.CharField(max_length=100)

    # Upstream context.
    event_type = models.CharField(max_length=40)
    pr_number = models.PositiveBigIntegerField(default=0)
    head_sha = models.CharField(max_length=64)
    ref = models.CharField(max_length=255, blank=True, help_text="pushed ref (trunk: main)")
    dispatch = models.ForeignKey(
        Dispatch, null=True, blank=True, on_delete=models.SET_NULL, related_name="jobs"
    )
    verified = models.BooleanField(
        default=False, help_text="delivery known here; unverified results are never mirrored"
    )
    source = models.CharField(max_length=20, choices=Source.choices)

    # Downstream run.
    run_id = models.BigIntegerField()
    run_attempt = models.PositiveIntegerField(default=1)
    workflow_url = models.URLField(max_length=500)
    status = models.CharField(max_length=20, choices=Status.choices)
    conclusion = models.CharField(max_length=20, choices=Conclusion.choices, blank=True)
    closed_by_sweeper = models.BooleanField(default=False)

    # Times: reported by the downstream (display) and observed by this server.
    reported_started_at = models.DateTimeField(null=True, blank=True)
    reported_completed_at = models.DateTimeField(null=True, blank=True)
    in_progress_received_at = models.DateTimeField(null=True, blank=True)
    completed_received_at = models.DateTimeField(null=True, blank=True)
    placed_at = models.DateTimeField(
        help_text="when the job happened: receipt time live, reported time when imported"
    )
    updated_at = models.DateTimeField()
    queue_seconds = models.FloatField(null=True, blank=True)
    execution_seconds = models.FloatField(null=True, blank=True)
    timing_source = models.CharField(
        max_length=20, choices=TimingSource.choices, default=TimingSource.NONE
    )

    # Results.
    tests_passed = models.PositiveBigIntegerField(null=True, blank=True)
    tests_failed = models.PositiveBigIntegerField(null=True, blank=True)
    tests_skipped = models.PositiveBigIntegerField(null=True, blank=True)
    tests_total = models.PositiveBigIntegerField(null=True, blank=True)
    failed_tests_truncated = models.BooleanField(default=False)
    artifact_url = models.URLField(max_length=500, blank=True)
    environment = models.JSONField(null=True, blank=True)
    triage_verdict = models.JSONField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["downstream", "delivery_id", "workflow_name", "job_name", "check_run_id"],
                name="job_row_key_unique",
            ),
        ]
        indexes = [
            models.Index(fields=["downstream", "placed_at"], name="job_downstream_time"),
            models.Index(fields=["placed_at"], name="job_time"),
            models.Index(fields=["pr_number", "placed_at"], name="job_pr"),
            models.Index(fields=["head_sha"], name="job_head_sha"),
            models.Index(
                fields=["downstream", "event_type", "head_sha", "workflow_name", "job_name"],
                name="job_logical",
            ),
            models.Index(fields=["status", "placed_at"], name="job_open"),
        ]

    def __str__(self) -> str:
        return f"{self.downstream_id}:{self.workflow_name}/{self.job_name}@{self.head_sha[:10]}"


class FailedTest(models.Model):
    """One failed test reported with a job (first 1,000 kept)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="failed_tests")
    classname = models.CharField(max_length=500, blank=True)
    name = models.CharField(max_length=500)
    message = models.TextField(blank=True)
    stacktrace = models.TextField(blank=True)
    duration = models.FloatField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["classname", "name"], name="failedtest_id")]

    def __str__(self) -> str:
        return f"{self.classname}::{self.name}"


class UsedToken(models.Model):
    """OIDC token ids already accepted, so a replayed token is refused."""

    jti = models.CharField(max_length=200, unique=True)
    expires_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return self.jti


class RateBucket(models.Model):
    """Token bucket per downstream for callback rate limiting (updated atomically in SQL)."""

    downstream = models.OneToOneField(
        Downstream, on_delete=models.CASCADE, related_name="rate_bucket"
    )
    tokens = models.FloatField()
    # Seconds since the epoch: plain arithmetic in SQL works the same on PostgreSQL and SQLite.
    updated_epoch = models.FloatField()

    def __str__(self) -> str:
        return f"{self.downstream_id}: {self.tokens:.1f} tokens"


class AllowlistImport(models.Model):
    """An imported allowlist file, kept verbatim so an export can keep its comments and order."""

    text = models.TextField()
    sha256 = models.CharField(max_length=64)
    source = models.CharField(max_length=500, help_text="path or URL it came from")
    imported_at = models.DateTimeField()
    effective_since = models.DateTimeField(help_text="--since, or the import time")
    report = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-imported_at", "-id"]

    def __str__(self) -> str:
        return f"{self.source} at {self.imported_at:%Y-%m-%d %H:%M}"


class BackendMaintainer(models.Model):
    """A user who maintains a backend (may request level changes for it)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="maintained"
    )
    downstream = models.ForeignKey(Downstream, on_delete=models.CASCADE, related_name="maintainers")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "downstream"], name="maintainer_unique")
        ]

    def __str__(self) -> str:
        return f"{self.user_id} maintains {self.downstream_id}"


class LevelOverride(models.Model):
    """A temporary downgrade by an admin: wins over the allowlist until it expires."""

    downstream = models.ForeignKey(Downstream, on_delete=models.CASCADE, related_name="overrides")
    level = models.PositiveSmallIntegerField(choices=Level.choices)
    reason = models.TextField()
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)

    class Meta:
        indexes = [models.Index(fields=["downstream", "expires_at"])]

    def __str__(self) -> str:
        return f"{self.downstream_id} held at L{self.level} until {self.expires_at:%Y-%m-%d}"


class PromotionRequest(models.Model):
    """A maintainer's request for a level change, with the evidence frozen when asked."""

    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        APPROVED = "approved", "approved"
        REJECTED = "rejected", "rejected"

    downstream = models.ForeignKey(Downstream, on_delete=models.PROTECT, related_name="requests")
    from_level = models.PositiveSmallIntegerField(choices=Level.choices)
    to_level = models.PositiveSmallIntegerField(choices=Level.choices)
    device = models.CharField(max_length=100, blank=True)
    oncalls = models.JSONField(default=list, blank=True)
    reason = models.TextField(blank=True)
    evidence = models.JSONField(help_text="gate evaluation and metrics when requested")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    requested_at = models.DateTimeField()
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_comment = models.TextField(blank=True)
    allowlist_text = models.TextField(blank=True, help_text="allowlist.yml after approval")
    pr_description = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["downstream"],
                condition=models.Q(status="pending"),
                name="one_pending_request_per_backend",
            )
        ]
        ordering = ["-requested_at"]

    def __str__(self) -> str:
        return f"{self.downstream_id}: L{self.from_level} → L{self.to_level} ({self.status})"


class GateExclusion(models.Model):
    """An incident window or a bogus job an admin took out of gating, with the reason."""

    downstream = models.ForeignKey(Downstream, on_delete=models.CASCADE, related_name="exclusions")
    start = models.DateTimeField(null=True, blank=True)
    end = models.DateTimeField(null=True, blank=True)
    job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.CASCADE)
    reason = models.TextField()
    created_at = models.DateTimeField()
    by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(job__isnull=False)
                | models.Q(start__isnull=False, end__isnull=False),
                name="exclusion_has_window_or_job",
            )
        ]

    def __str__(self) -> str:
        return f"{self.downstream_id}: excluded ({self.reason[:40]})"


class GateEvaluation(models.Model):
    """One daily gate evaluation of a backend (the history `k` consecutive days reads)."""

    downstream = models.ForeignKey(Downstream, on_delete=models.CASCADE, related_name="evaluations")
    day = models.DateField()
    current_level = models.PositiveSmallIntegerField(choices=Level.choices)
    promotion = models.CharField(max_length=30, help_text="eligible / not_eligible / …")
    retention = models.CharField(max_length=30, help_text="keep / demote / …")
    stable_promotion = models.CharField(max_length=30)
    stable_retention = models.CharField(max_length=30)
    detail = models.JSONField()
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["downstream", "day"], name="one_evaluation_per_day")
        ]
        ordering = ["downstream", "day"]

    def __str__(self) -> str:
        return f"{self.downstream_id} {self.day}: {self.promotion}/{self.retention}"


class DemotionWarning(models.Model):
    """A backend failing its level's criteria: an admin decides before the deadline."""

    class Status(models.TextChoices):
        OPEN = "open", "open"
        DEMOTED = "demoted", "demoted"
        DISMISSED = "dismissed", "dismissed"

    downstream = models.ForeignKey(Downstream, on_delete=models.CASCADE, related_name="warnings")
    level = models.PositiveSmallIntegerField(choices=Level.choices)
    first_failing_on = models.DateField()
    deadline = models.DateField()
    failing = models.JSONField(help_text="the failing criteria when raised")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.OPEN)
    created_at = models.DateTimeField()
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    comment = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["downstream"],
                condition=models.Q(status="open"),
                name="one_open_warning_per_backend",
            )
        ]

    def __str__(self) -> str:
        return f"{self.downstream_id}: demotion warning ({self.status})"


class RepositoryAlias(models.Model):
    """Another name of a backend's repository (renamed or transferred); the row is the audit."""

    old_name = models.CharField(max_length=200, help_text="owner/repo no longer the backend's name")
    downstream = models.ForeignKey(Downstream, on_delete=models.PROTECT, related_name="aliases")
    renamed = models.BooleanField(
        default=False, help_text="the backend took a new name when this alias was recorded"
    )
    reason = models.TextField()
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(Lower("old_name"), name="repository_alias_name_ci_unique"),
        ]
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.old_name} → {self.downstream_id}"


# --- Relay part 2: check runs, the merge gate, re-runs, on-call comments (hud.checks.mirror) ------


class CheckRunMirror(models.Model):
    """A job's check run on the upstream PR: what it should show and what GitHub has."""

    job = models.OneToOneField(Job, on_delete=models.CASCADE, related_name="mirror")
    wanted = models.BooleanField(default=False, help_text="the job should have a check run")
    skip_reason = models.CharField(max_length=300, blank=True)
    name = models.CharField(max_length=600, blank=True)
    head_sha = models.CharField(max_length=64, blank=True)
    check_run_id = models.BigIntegerField(null=True, blank=True)
    html_url = models.URLField(max_length=500, blank=True)
    desired_hash = models.CharField(max_length=64, blank=True)
    sent_hash = models.CharField(max_length=64, blank=True)
    last_sent_state = models.JSONField(null=True, blank=True, help_text="status and conclusion")
    source_updated_at = models.DateTimeField(
        null=True, blank=True, help_text="job.updated_at the desired state was computed from"
    )
    claimed_at = models.DateTimeField(null=True, blank=True, help_text="lease of a sync")
    resync = models.BooleanField(default=False, help_text="asked to sync while claimed")
    create_attempted_at = models.DateTimeField(
        null=True, blank=True, help_text="a create was sent and may have reached GitHub"
    )
    attempts = models.PositiveIntegerField(default=0, help_text="failed attempts in a row")
    writes = models.PositiveIntegerField(default=0, help_text="creates and updates sent")
    sent_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["head_sha"], name="mirror_head_sha")]

    def __str__(self) -> str:
        return f"{self.name or self.job_id} → {self.check_run_id or 'not created'}"


class GateCheck(models.Model):
    """The one `crcr/gate` check run of an upstream head SHA and its last decision."""

    head_sha = models.CharField(max_length=64, unique=True)
    check_run_id = models.BigIntegerField(null=True, blank=True)
    html_url = models.URLField(max_length=500, blank=True)
    state = models.CharField(max_length=20, blank=True, help_text="pending, failure or success")
    desired_hash = models.CharField(max_length=64, blank=True)
    sent_hash = models.CharField(max_length=64, blank=True)
    last_sent_state = models.JSONField(null=True, blank=True)
    evaluated_at = models.DateTimeField(null=True, blank=True)
    recheck_at = models.DateTimeField(
        null=True, blank=True, help_text="when time alone can change the decision"
    )
    claimed_at = models.DateTimeField(null=True, blank=True)
    resync = models.BooleanField(default=False)
    create_attempted_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    writes = models.PositiveIntegerField(default=0)
    sent_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["recheck_at"], name="gatecheck_recheck")]

    def __str__(self) -> str:
        return f"crcr/gate@{self.head_sha[:10]}: {self.state or 'unset'}"


class OncallComment(models.Model):
    """The one PR comment pinging a backend's on-calls, edited in place."""

    pr_number = models.PositiveBigIntegerField()
    downstream = models.ForeignKey(
        Downstream, on_delete=models.CASCADE, related_name="oncall_comments"
    )
    comment_id = models.BigIntegerField(null=True, blank=True)
    html_url = models.URLField(max_length=500, blank=True)
    desired_hash = models.CharField(max_length=64, blank=True)
    last_body_hash = models.CharField(max_length=64, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    resync = models.BooleanField(default=False)
    attempts = models.PositiveIntegerField(default=0)
    writes = models.PositiveIntegerField(default=0)
    sent_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["pr_number", "downstream"], name="oncall_comment_pr_downstream_unique"
            )
        ]

    def __str__(self) -> str:
        return f"PR {self.pr_number} on-call comment for {self.downstream_id}"


class RerunRequest(models.Model):
    """A re-run of a downstream run asked for from the upstream PR (its time sets queue time)."""

    class Kind(models.TextChoices):
        FAILED_JOBS = "failed_jobs", "failed jobs"
        ALL = "all", "whole run"

    class Outcome(models.TextChoices):
        PENDING = "pending", "pending"
        REQUESTED = "requested", "requested"
        ALREADY_RUNNING = "already_running", "already running"
        FAILED = "failed", "failed"

    downstream = models.ForeignKey(Downstream, on_delete=models.CASCADE, related_name="reruns")
    run_id = models.BigIntegerField()
    kind = models.CharField(max_length=20, choices=Kind.choices)
    delivery_id = models.CharField(max_length=100, help_text="the rerequested webhook delivery")
    head_sha = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField()
    requested_at = models.DateTimeField(
        null=True, blank=True, help_text="when GitHub accepted the re-run"
    )
    outcome = models.CharField(max_length=20, choices=Outcome.choices, default=Outcome.PENDING)
    claimed_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    reason = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["delivery_id", "downstream", "run_id"], name="rerun_once_per_delivery"
            )
        ]
        indexes = [models.Index(fields=["downstream", "run_id", "requested_at"])]

    def __str__(self) -> str:
        return f"re-run {self.kind} of {self.downstream_id}:{self.run_id} ({self.outcome})"


# --- Notifications: email and Slack-compatible webhooks (hud.notifications) ------------------


class NotificationTarget(models.Model):
    """Where notifications go: an address or a webhook, for one backend or (no backend) all."""

    class Kind(models.TextChoices):
        EMAIL = "email", "email"
        WEBHOOK = "webhook", "webhook (Slack-compatible)"

    downstream = models.ForeignKey(
        Downstream,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="notification_targets",
        help_text="empty: every backend",
    )
    kind = models.CharField(max_length=20, choices=Kind.choices)
    address = models.CharField(
        max_length=500, help_text="an email address, or the webhook URL (a secret: never shown)"
    )
    events = models.JSONField(
        default=list, blank=True, help_text="event types to send; empty: all of them"
    )
    enabled = models.BooleanField(default=True)
    description = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["downstream__full_name", "kind", "id"]

    def __str__(self) -> str:
        scope = self.downstream.full_name if self.downstream_id else "all backends"
        return f"{self.kind} for {scope}: {self.description or self.pk}"


class Notification(models.Model):
    """One event sent to one target: the audit row, and by its key what makes it once-only."""

    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        SENT = "sent", "sent"
        FAILED = "failed", "failed"

    event_key = models.CharField(
        max_length=300, unique=True, help_text="the event's key and the target: sent once"
    )
    event = models.CharField(max_length=250, db_index=True, help_text="e.g. warning:12:opened")
    event_type = models.CharField(max_length=40)
    downstream = models.ForeignKey(
        Downstream, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    target = models.ForeignKey(
        NotificationTarget,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="notifications",
    )
    kind = models.CharField(max_length=20, choices=NotificationTarget.Kind.choices)
    recipient = models.CharField(max_length=500, help_text="as shown: webhook URLs masked")
    payload = models.JSONField(help_text="subject, text and Slack blocks")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField()
    next_attempt_at = models.DateTimeField(
        null=True, blank=True, help_text="when a retry is due; empty once sent or given up"
    )
    claimed_until = models.DateTimeField(null=True, blank=True, help_text="lease of a send")
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["status", "next_attempt_at"], name="notification_due"),
            models.Index(fields=["created_at"], name="notification_time"),
        ]
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.event} → {self.kind} ({self.status})"


# The derived layer lives in its own module; importing it here registers its models.
from hud.models.derived import DailyRollup, LogicalJob  # noqa: E402,F401
