"""`manage.py rebuild_derived`: recompute the logical jobs and daily rollups from the attempts."""

from django.core.management.base import BaseCommand
from django.db import connection, transaction
from tqdm import tqdm

from hud.ingestion import derived


class Command(BaseCommand):
    """The layer is kept at write time; this puts it back after a rule change or a repair."""

    help = (
        "Delete and recompute every derived row (one per logical job, one per backend, event "
        "type and day) from the stored attempts, in one transaction."
    )

    def add_arguments(self, parser) -> None:
        """--no-progress."""
        parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")

    def handle(self, *args, no_progress: bool, **options) -> None:
        """Rebuild under one transaction, so readers see the old layer or the new one."""
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(derived.COUNT_ATTEMPTS)
            (total,) = cursor.fetchone()
            with (
                tqdm(total=total, unit="attempt", disable=no_progress, file=self.stderr) as bar,
                connection.chunked_cursor() as stream,
            ):
                jobs = derived.rebuild(cursor, stream, connection.vendor, bar.update)
        self.stdout.write(f"rebuilt {jobs} logical jobs from {total} attempts")
