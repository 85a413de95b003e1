"""Backends and their levels: the level scale, a downstream, its level history, overrides,
the imported allowlist and the other names of its repository."""

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
