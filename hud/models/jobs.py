"""Jobs: one row per attempt of a downstream job (keyed like upstream), its failed tests, and
what admits a callback (replayed OIDC tokens, the per-backend rate bucket)."""

from django.db import models

from hud.models.backends import Downstream
from hud.models.relay import Dispatch


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
            # With the id: a backend's window of attempt ids (the subqueries of failed tests and
            # cross-commit evidence) is an index-only scan, which the planner takes over
            # `job_time` (13 ms -> 0.2 ms for two backends' fortnight at 1M jobs).
            models.Index(fields=["downstream", "placed_at", "id"], name="job_downstream_time_id"),
            models.Index(fields=["placed_at"], name="job_time"),
            models.Index(fields=["pr_number", "placed_at"], name="job_pr"),
            models.Index(fields=["head_sha"], name="job_head_sha"),
            models.Index(
                fields=["downstream", "event_type", "head_sha", "workflow_name", "job_name"],
                name="job_logical",
            ),
            models.Index(fields=["status", "placed_at"], name="job_open"),
            # A backend's runs of some jobs in a window (attribution's cross-commit evidence):
            # without it PostgreSQL may walk job_time across every backend's window.
            models.Index(fields=["downstream", "job_name", "placed_at"], name="job_series"),
            # A backend's timed attempts in a window (the summary's execution intervals, the
            # daily medians, the gate's durations), read from the index alone on PostgreSQL:
            # the heap rows sit scattered across every backend's callbacks (at 1M jobs, 50
            # backends' 30 days: 86,062 rows, 87 -> 32 ms).
            models.Index(
                fields=["downstream", "placed_at"],
                include=["execution_seconds", "queue_seconds", "event_type"],
                condition=models.Q(status="completed") & ~models.Q(conclusion="skipped"),
                name="job_timed",
            ),
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
        # Name first: attribution looks a judged job's tests up by name across a window; a
        # drill-down by (classname, name) uses it as well. Migration 0014 also raises the
        # planner's sample of `job_id`, whose few heavy jobs hid how many jobs have none.
        indexes = [models.Index(fields=["name", "classname"], name="failedtest_test")]

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
