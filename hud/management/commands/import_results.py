"""`manage.py import_results FILE`: load relay → HUD forward bodies (JSON lines) as history."""

from collections import Counter
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from tqdm import tqdm

from hud.core.payload import PayloadError, decode_json
from hud.ingestion import ingest
from hud.models import Job

BATCH_LINES = 500


class Command(BaseCommand):
    """Each line is a body of `POST /api/crcr/results`; bad lines are reported, the rest load."""

    help = "Import JSON-lines of relay forward bodies; prints created/updated/duplicate/rejected."

    def add_arguments(self, parser) -> None:
        """FILE and --quiet."""
        parser.add_argument("file", type=Path)
        parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")

    def handle(self, *args, file: Path, no_progress: bool, **options) -> None:
        """Load every line in batches of transactions, one savepoint per line."""
        if not file.is_file():
            raise CommandError(f"{file} is not a file")
        counts: Counter[str] = Counter()
        problems: list[str] = []
        with file.open("rb") as handle:
            total = sum(1 for _ in handle)
        with (
            file.open("rb") as handle,
            tqdm(total=total, unit="line", disable=no_progress, file=self.stderr) as progress,
        ):
            batch: list[tuple[int, bytes]] = []
            for number, line in enumerate(handle, start=1):
                if line.strip():
                    batch.append((number, line))
                if len(batch) >= BATCH_LINES:
                    self._load(batch, counts, problems)
                    progress.update(len(batch))
                    batch = []
            self._load(batch, counts, problems)
            progress.update(len(batch))
        for problem in problems[:100]:
            self.stderr.write(problem)
        if len(problems) > 100:
            self.stderr.write(f"… and {len(problems) - 100} more rejected lines")
        summary = ", ".join(
            f"{counts[key]} {key}"
            for key in ("created", "updated", "duplicate", "stale", "ignored", "rejected")
        )
        self.stdout.write(f"{summary} ({sum(counts.values())} lines)")

    @staticmethod
    def _load(batch: list[tuple[int, bytes]], counts: Counter, problems: list[str]) -> None:
        with transaction.atomic():
            for number, line in batch:
                try:
                    with transaction.atomic():
                        outcome = ingest.receive_forward(
                            decode_json(line), source=Job.Source.IMPORT
                        )
                    counts[outcome.status] += 1
                except PayloadError as error:
                    counts["rejected"] += 1
                    problems.append(f"line {number}: {error.detail}")
                except ingest.Rejected as rejection:
                    counts["rejected"] += 1
                    problems.append(f"line {number}: {rejection.code}: {rejection.detail}")
