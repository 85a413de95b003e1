"""Relay part 2: check runs, the merge gate, re-runs, on-call comments (hud.checks.mirror)."""

from django.db import models

from hud.models.backends import Downstream
from hud.models.jobs import Job


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
