"""`manage.py seed_demo`: a deterministic demo history (skipped when data already exists)."""

import sys

from django.core.management.base import BaseCommand

from hud import promotion
from hud.core import clock, revisions
from hud.models import Downstream
from hud.ops import demo


class Command(BaseCommand):
    """Build about six weeks of believable CRCR history through the real services."""

    help = "Load the demo history (backends L1–L4, PRs, trunk, nightlies, re-runs, failures)."

    def add_arguments(self, parser) -> None:
        """--no-progress."""
        parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")

    def handle(self, *args, no_progress: bool, **options) -> None:
        """Seed once; an existing database is left alone."""
        if Downstream.objects.exists():
            self.stdout.write("seed_demo: the database already holds backends; nothing to do")
        else:
            # tqdm redraws one line with carriage returns; Django's OutputWrapper would end
            # every redraw with a newline.
            progress = None if no_progress else sys.stderr
            with revisions.deferred():
                demo.build(clock.now(), log=self.stdout.write, progress=progress)
            # The server's first views then find every backend's gate kept (the cache is
            # shared with it), as `run_periodic` keeps them afterwards.
            self.stdout.write(f"seed_demo: kept the gates of {promotion.refresh_gates()} backends")
        self.stdout.write("Demo sign-ins (embedded default only; never in production):")
        for line in demo.ensure_demo_users():
            self.stdout.write(line)
