"""`manage.py seed_demo`: a deterministic demo history (skipped when data already exists)."""

from django.core.management.base import BaseCommand

from hud import clock, demo
from hud.models import Downstream


class Command(BaseCommand):
    """Build about six weeks of believable CRCR history through the real services."""

    help = "Load the demo history (backends L1–L4, PRs, trunk, nightlies, re-runs, failures)."

    def handle(self, *args, **options) -> None:
        """Seed once; an existing database is left alone."""
        if Downstream.objects.exists():
            self.stdout.write("seed_demo: the database already holds backends; nothing to do")
        else:
            demo.build(clock.now(), log=self.stdout.write)
        self.stdout.write("Demo sign-ins (embedded default only; never in production):")
        for line in demo.ensure_demo_users():
            self.stdout.write(line)
