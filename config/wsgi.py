"""WSGI entry point for gunicorn."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

application = get_wsgi_application()

from hud.core.process import freeze_startup_objects  # noqa: E402 - after Django's set-up

freeze_startup_objects()
