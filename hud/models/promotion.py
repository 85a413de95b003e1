"""Promotion: level-change requests, gate exclusions, the daily gate evaluations and demotion
warnings (hud.promotion)."""

from django.conf import settings
from django.db import models

from hud.models.backends import Downstream, Level
from hud.models.jobs import Job


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
