"""The derived layer: one row per logical job and a daily rollup per backend and event type.

Both are kept by `hud.ingestion.derived` in the transaction that stores an attempt, and rebuilt
from the
attempts by `manage.py rebuild_derived`; a property test proves the two equal. Pages read these
rows instead of re-deriving every attempt of a window per request.
"""

from django.db import models

from hud.models.backends import Downstream
from hud.models.jobs import Job


class OutcomeClass(models.TextChoices):
    """How a logical job counts in pass rates (hud.stats.outcome_class)."""

    SUCCESS = "success", "success"
    FAILURE = "failure", "failure"
    TIMED_OUT = "timed_out", "timed out"
    CANCELLED = "cancelled", "cancelled"
    SUPERSEDED = "superseded", "superseded by a newer push"
    EXCLUDED = "excluded", "not counted (unfinished, skipped, neutral)"


class LogicalJob(models.Model):
    """One logical job (CRCR.md, "Identity"): its latest attempt and what is derived from all."""

    # No index of its own: every index below leads with it, and PostgreSQL took this one for
    # a backend's window, reading all its logical jobs (0.24 s for ten backends' month at 1M
    # jobs, against 0.07 s through logicaljob_downstream_time; docs/performance.md).
    downstream = models.ForeignKey(
        Downstream, on_delete=models.PROTECT, related_name="logical_jobs", db_index=False
    )
    event_type = models.CharField(max_length=40)
    head_sha = models.CharField(max_length=64)
    workflow_name = models.CharField(max_length=255)
    job_name = models.CharField(max_length=255)

    pr_number = models.PositiveBigIntegerField(default=0, help_text="the latest attempt's")
    # A head SHA can be pushed to two PRs: its attempts then carry different PR numbers.
    first_pr_number = models.PositiveBigIntegerField(default=0, help_text="the first attempt's")
    ref = models.CharField(max_length=255, blank=True)
    latest_job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="+")
    latest_status = models.CharField(max_length=20, choices=Job.Status.choices)
    latest_conclusion = models.CharField(max_length=20, choices=Job.Conclusion.choices, blank=True)
    outcome = models.CharField(max_length=20, choices=OutcomeClass.choices)
    first_outcome = models.CharField(
        max_length=20, choices=OutcomeClass.choices, help_text="the first attempt's class"
    )
    attempts = models.PositiveIntegerField(help_text="attempt rows; re-runs are attempts - 1")
    queue_seconds = models.FloatField(null=True, blank=True, help_text="latest attempt")
    execution_seconds = models.FloatField(null=True, blank=True, help_text="latest attempt")
    closed_by_sweeper = models.BooleanField(default=False, help_text="latest attempt")
    failed_tests = models.PositiveIntegerField(default=0, help_text="stored for the latest attempt")
    flake_eligible = models.BooleanField(
        default=False, help_text="a finished attempt failed or passed (hud.stats.flake_rate)"
    )
    flaky = models.BooleanField(
        default=False, help_text="a finished attempt failed and another passed"
    )
    placed_at = models.DateTimeField(help_text="the latest attempt's: places the job in a window")
    first_placed_at = models.DateTimeField()
    # The last row's in attempt order: places first-attempt and flakiness figures in a window
    # (hud.stats' latest_placed_at); a later leg of the latest attempt may be placed apart.
    last_placed_at = models.DateTimeField()
    # What this row added to DailyRollup, as JSON {day: {field: n}}: the next write applies the
    # difference, so rollups move by increments that commute under concurrency.
    rollup_contribution = models.TextField(default="{}")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["downstream", "event_type", "head_sha", "workflow_name", "job_name"],
                name="logicaljob_key_unique",
            ),
        ]
        indexes = [
            models.Index(fields=["downstream", "placed_at"], name="logicaljob_downstream_time"),
            # A backend's logical jobs of some event types in a window: the backend page's
            # matrices (hud.reads.matrix). Without it PostgreSQL ANDed the backend's nightlies
            # of all history with every backend's window (2.1 → 0.2 ms at 1M jobs).
            models.Index(
                fields=["downstream", "event_type", "placed_at"], name="logicaljob_event_time"
            ),
            models.Index(
                fields=["downstream", "last_placed_at"], name="logicaljob_downstream_last"
            ),
            models.Index(fields=["placed_at"], name="logicaljob_time"),
            models.Index(fields=["downstream", "pr_number"], name="logicaljob_pr"),
            models.Index(fields=["downstream", "first_pr_number"], name="logicaljob_first_pr"),
            # The logical jobs of a PR's or commit's SHAs, on every backend (attribution, pages).
            models.Index(fields=["head_sha"], name="logicaljob_head_sha"),
            # Their failing and superseded ones, the cross-backend evidence of a verdict: a few
            # rows per SHA, not every backend's (85 → 30 ms for a gate's 700 SHAs at 1M jobs).
            models.Index(
                fields=["head_sha"],
                name="logicaljob_failing_sha",
                condition=models.Q(
                    outcome__in=[
                        OutcomeClass.FAILURE,
                        OutcomeClass.TIMED_OUT,
                        OutcomeClass.CANCELLED,
                        OutcomeClass.SUPERSEDED,
                    ]
                ),
            ),
            # A judged job's nearest trunk and nightly references (attribution): one probe each,
            # not a scan of the backend's fortnight (0.47 → 0.03 ms per judged job at 1M jobs);
            # in the order it is read (latest job breaking a tie), so the probe stops at the
            # first row that qualifies instead of sorting every row of its look-back.
            models.Index(
                fields=[
                    "downstream",
                    "workflow_name",
                    "job_name",
                    "event_type",
                    "placed_at",
                    "latest_job",
                ],
                name="logicaljob_series_latest",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.downstream_id}:{self.workflow_name}/{self.job_name}@{self.head_sha[:10]}"

    @property
    def reruns(self) -> int:
        """Attempts after the first."""
        return self.attempts - 1


class DailyRollup(models.Model):
    """Counts and duration sums of one backend's jobs of one event type on one UTC day."""

    downstream = models.ForeignKey(Downstream, on_delete=models.PROTECT, related_name="+")
    event_type = models.CharField(max_length=40)
    day = models.DateField()

    success = models.IntegerField(default=0)
    failure = models.IntegerField(default=0)
    timed_out = models.IntegerField(default=0)
    cancelled = models.IntegerField(default=0)
    superseded = models.IntegerField(default=0)
    excluded = models.IntegerField(default=0)
    first_success = models.IntegerField(default=0)
    first_counted = models.IntegerField(default=0)
    completed_jobs = models.IntegerField(default=0)
    rerun_jobs = models.IntegerField(default=0)
    failed_tests = models.BigIntegerField(default=0)
    completed_attempts = models.IntegerField(default=0)
    runs = models.IntegerField(default=0, help_text="completed, not skipped attempts")
    queue_n = models.IntegerField(default=0)
    # Durations are summed in whole milliseconds so that increments add up exactly.
    queue_ms = models.BigIntegerField(default=0)
    execution_n = models.IntegerField(default=0)
    execution_ms = models.BigIntegerField(default=0)
    end_to_end_n = models.IntegerField(default=0)
    end_to_end_ms = models.BigIntegerField(default=0)
    overrun_known = models.IntegerField(default=0)
    overrun = models.IntegerField(default=0)
    # How many writes changed this row (1 when inserted): with the row ids, it tells a read
    # whether what it kept of this day (hud.reads.rollups, the daily medians) is still true.
    revision = models.IntegerField(default=0, db_default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["downstream", "event_type", "day"], name="dailyrollup_key_unique"
            ),
        ]
        indexes = [models.Index(fields=["day"], name="dailyrollup_day")]

    def __str__(self) -> str:
        return f"{self.downstream_id}:{self.event_type}@{self.day}"
