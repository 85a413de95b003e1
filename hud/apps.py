"""The domain app: owns every model and service."""

from django.apps import AppConfig


class HudConfig(AppConfig):
    """CRCR HUD domain."""

    name = "hud"
    verbose_name = "CRCR HUD"

    def ready(self) -> None:
        """Register the Celery tasks, so hud.core.taskqueue finds each by its stable name, and
        the signals that keep backends' revisions (hud.promotion.snapshot)."""
        from hud import tasks  # noqa: F401
        from hud.promotion import snapshot

        snapshot.connect_signals()
