"""`manage.py prune --older-than DAYS`: drop failed-test details and raw bodies past retention."""

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from hud.ops import retention


class Command(BaseCommand):
    """Keeps every job row, so statistics over the kept (and any) period do not change."""

    help = (
        "Delete failed tests of jobs placed more than DAYS ago and clear raw delivery payloads "
        "received before then, in batches; job rows are kept."
    )

    def add_arguments(self, parser) -> None:
        """--older-than, --dry-run, --batch-size, --no-progress."""
        parser.add_argument("--older-than", type=int, required=True, metavar="DAYS")
        parser.add_argument("--dry-run", action="store_true", help="count only, remove nothing")
        parser.add_argument(
            "--batch-size",
            type=int,
            default=retention.DEFAULT_BATCH_SIZE,
            metavar="N",
            help=f"rows per transaction (default {retention.DEFAULT_BATCH_SIZE})",
        )
        parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")

    def handle(
        self,
        *args,
        older_than: int,
        dry_run: bool,
        batch_size: int,
        no_progress: bool,
        **options,
    ) -> None:
        """Count, then (unless --dry-run) prune with one progress bar per kind of row."""
        if older_than < 1:
            raise CommandError("--older-than must be at least 1 day")
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1")
        cutoff = retention.cutoff_for(older_than)
        planned = retention.prune_counts(cutoff)
        if dry_run:
            report = planned
        else:
            with (
                tqdm(
                    total=planned.failed_tests,
                    desc="failed tests",
                    unit="row",
                    disable=no_progress,
                    file=self.stderr,
                ) as tests_bar,
                tqdm(
                    total=planned.payloads,
                    desc="payloads",
                    unit="row",
                    disable=no_progress,
                    file=self.stderr,
                ) as payloads_bar,
            ):
                report = retention.prune(
                    cutoff,
                    batch_size=batch_size,
                    on_failed_tests=tests_bar.update,
                    on_payloads=payloads_bar.update,
                )
        for line in report.lines():
            self.stdout.write(line)
