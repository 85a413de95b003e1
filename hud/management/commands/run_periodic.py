"""`manage.py run_periodic`: the embedded default's beat (production uses celery beat)."""

import time

from django.core.management.base import BaseCommand, CommandError

from hud import periodic
from hud.core.process import freeze_startup_objects


class Command(BaseCommand):
    """Run the periodic jobs once, or forever every --interval seconds."""

    help = "Run the periodic jobs (sweeper, token pruning) once, or in a loop with --loop."

    def add_arguments(self, parser) -> None:
        """--loop and --interval."""
        parser.add_argument("--loop", action="store_true", help="keep running")
        parser.add_argument(
            "--interval",
            type=int,
            default=240,
            help="seconds between runs (240: under the kept gates' 300 s age bound)",
        )

    def handle(self, *args, loop: bool, interval: int, **options) -> None:
        """Run each periodic job and print what it did."""
        if interval < 1:
            raise CommandError("--interval must be at least 1 second")
        if loop:  # a long-lived process, as a worker is
            freeze_startup_objects()
        while True:
            for name, result in periodic.run_all().items():
                self.stdout.write(f"{name}: {result}")
            if not loop:
                return
            time.sleep(interval)
