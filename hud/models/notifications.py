"""Notifications: email and Slack-compatible webhooks (hud.notifications): where they go and
one audit row per event sent to a target."""

from django.db import models

from hud.models.backends import Downstream


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
