"""The HTTP interfaces (DRF); owns no models."""

from django.apps import AppConfig


class ApiConfig(AppConfig):
    """CRCR HUD HTTP API."""

    name = "api"
