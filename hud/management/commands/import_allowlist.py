"""`manage.py import_allowlist [PATH_OR_URL] [--since YYYY-MM-DD] [--dry-run]`."""

import datetime as dt

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from hud.core.allowlist import AllowlistError, load_allowlist_text
from hud.levels import import_allowlist


def _parse_since(value: str) -> dt.datetime:
    try:
        day = dt.date.fromisoformat(value)
    except ValueError as error:
        raise CommandError(f"--since {value!r}: expected YYYY-MM-DD") from error
    return dt.datetime.combine(day, dt.time(0, 0), tzinfo=dt.UTC)


class Command(BaseCommand):
    """Import the allowlist file into downstream levels and their history."""

    help = (
        "Import .github/allowlist.yml (a path or an https URL; default CRCR_ALLOWLIST) into "
        "downstream levels. History is never deleted: repos gone from the file are delisted."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        """Declare the path, --since and --dry-run."""
        parser.add_argument("source", nargs="?", help="path or https URL of the allowlist")
        parser.add_argument(
            "--since",
            help="back-date the level changes to this UTC day (YYYY-MM-DD)",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="report what would change, change nothing"
        )

    def handle(self, *args: object, **options: object) -> None:
        """Load, import and print the report."""
        source = options.get("source") or getattr(settings, "CRCR_ALLOWLIST", None)
        if not source:
            raise CommandError("no allowlist given and CRCR_ALLOWLIST is not set")
        since = _parse_since(options["since"]) if options.get("since") else None
        try:
            text = load_allowlist_text(str(source))
            report = import_allowlist(
                text, source=str(source), since=since, dry_run=bool(options.get("dry_run"))
            )
        except AllowlistError as error:
            raise CommandError(f"{source}: {error}") from error
        for line in report.lines():
            self.stdout.write(line)
        if report.conflicts:
            self.stderr.write(
                f"{len(report.conflicts)} conflict(s) with approvals pending upstream; "
                "those levels were kept."
            )
