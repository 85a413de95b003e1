"""Accounts: who maintains a backend (and may request level changes for it)."""

from django.conf import settings
from django.db import models

from hud.models.backends import Downstream


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
