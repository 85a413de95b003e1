"""CSV export for every list endpoint, with spreadsheet-formula cells escaped."""

import csv
import io
import json
from collections.abc import Iterable, Iterator
from typing import Any

from django.http import StreamingHttpResponse
from rest_framework.renderers import BaseRenderer

# A cell starting with one of these is run as a formula by spreadsheet programs.
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
CSV_ROW_CAP = 100_000


def escape_cell(value: Any) -> str:
    """Render one cell as text, neutralising spreadsheet formulas (OWASP CSV injection)."""
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        value = json.dumps(value, sort_keys=True)
    text = str(value)
    if text.startswith(FORMULA_PREFIXES) and not _is_number(text):
        return "'" + text
    return text


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def csv_lines(rows: Iterable[dict[str, Any]], columns: list[str] | None = None) -> Iterator[str]:
    """Yield CSV text line by line (header first) for streaming, at most CSV_ROW_CAP rows."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    header_written = False
    for index, row in enumerate(rows):
        if index >= CSV_ROW_CAP:
            break
        if not header_written:
            columns = columns or list(row.keys())
            writer.writerow(columns)
            header_written = True
        writer.writerow([escape_cell(row.get(column)) for column in columns])
        yield buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
    if not header_written and columns:
        writer.writerow(columns)
        yield buffer.getvalue()


def csv_download(
    rows: Iterable[dict[str, Any]], columns: list[str] | None, filename: str
) -> StreamingHttpResponse:
    """A streamed CSV attachment of `rows` (header first, formulas escaped, capped)."""
    response = StreamingHttpResponse(csv_lines(rows, columns), content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="{filename}.csv"'
    return response


class SafeCSVRenderer(BaseRenderer):
    """`?format=csv`: a list (or a page's `results`) as CSV."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: dict | None = None,
    ) -> str:
        """Render list data as CSV; an error body becomes a one-row CSV."""
        if isinstance(data, dict) and "results" in data:
            data = data["results"]
        if isinstance(data, dict):
            data = [data]
        return "".join(csv_lines(data or []))
