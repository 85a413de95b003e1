"""Django project package: settings, URLs, WSGI and Celery entry points."""

from config.celery import app as celery_app

__all__ = ["celery_app"]
