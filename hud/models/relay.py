"""Relay part 1: upstream webhook deliveries and their repository_dispatches to backends
(hud.relay)."""

from django.db import models

from hud.models.backends import Downstream, Level


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
