"""The domain app: owns every model and service."""

from django.apps import AppConfig


class HudConfig(AppConfig):
    """CRCR HUD domain."""

    name = "hud"
    verbose_name = "CRCR HUD"

    def ready(self) -> None:
        """Register the Celery tasks, so hud.core.taskqueue finds each by its stable name."""
        from hud import tasks  # noqa: F401
