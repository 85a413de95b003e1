"""The domain app: owns every model and service."""

from django.apps import AppConfig


class HudConfig(AppConfig):
    """CRCR HUD domain."""

    name = "hud"
    verbose_name = "CRCR HUD"
