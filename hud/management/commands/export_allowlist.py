"""`manage.py export_allowlist [-o FILE]`."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from hud.core.allowlist import AllowlistError
from hud.levels import export_allowlist_text


class Command(BaseCommand):
    """Write the current levels in the allowlist format."""

    help = (
        "Write the levels of listed downstreams as .github/allowlist.yml, keeping the comments "
        "and order of the latest imported file."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        """Declare -o/--output."""
        parser.add_argument("-o", "--output", help="file to write (default: standard output)")

    def handle(self, *args: object, **options: object) -> None:
        """Render and write the allowlist."""
        try:
            text = export_allowlist_text()
        except AllowlistError as error:
            raise CommandError(str(error)) from error
        output = options.get("output")
        if output:
            Path(str(output)).write_text(text, encoding="utf-8")
            self.stderr.write(f"wrote {output}")
        else:
            self.stdout.write(text, ending="")
