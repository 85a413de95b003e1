"""Streamed exports (CSV with spreadsheet-formula cells escaped, NDJSON) for list endpoints."""

import csv
import io
import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from django.http import StreamingHttpResponse
from rest_framework.renderers import BaseRenderer
from rest_framework.utils.encoders import JSONEncoder

# A cell starting with one of these is run as a formula by spreadsheet programs.
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
FORMULA_STARTS = frozenset("".join(FORMULA_PREFIXES))
CSV_ROW_CAP = 100_000
# Cells of these types are written as they are: no formula can hide in them.
PLAIN_CELLS = {int, float, bool, type(None)}
# Characters of a streamed response handed to the server at a time.
STREAM_PIECE = 64 * 1024
# As DRF's JSONRenderer writes (compact, UTF-8, no NaN), one object a line.
JSON_LINE = JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


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


def _in_pieces(buffer: io.StringIO, write: Callable[[Any], Any], rows: Iterable) -> Iterator[str]:
    """Write each row into `buffer`; hand its text on about STREAM_PIECE characters at a time."""
    for row in rows:
        write(row)
        if buffer.tell() >= STREAM_PIECE:
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
    if buffer.tell():
        yield buffer.getvalue()


def csv_records(columns: list[str], rows: Iterable[Sequence[Any]]) -> Iterator[str]:
    """CSV text of rows given as value lists in `columns` order: the header first."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(columns)

    def write(row: Sequence[Any]) -> None:
        # Inline checks: a call per cell was a third of an export's time.
        writer.writerow(
            [
                cell
                if cell.__class__ in PLAIN_CELLS
                or (cell.__class__ is str and cell[:1] not in FORMULA_STARTS)
                else escape_cell(cell)
                for cell in row
            ]
        )

    return _in_pieces(buffer, write, rows)


def ndjson_records(columns: list[str], rows: Iterable[Sequence[Any]]) -> Iterator[str]:
    """NDJSON of rows given as value lists: one JSON object a line, keyed by `columns`."""
    buffer = io.StringIO()

    def write(row: Sequence[Any]) -> None:
        buffer.write(JSON_LINE(dict(zip(columns, row, strict=True))))
        buffer.write("\n")

    return _in_pieces(buffer, write, rows)


def csv_lines(rows: Iterable[dict[str, Any]], columns: list[str] | None = None) -> Iterator[str]:
    """CSV text of dict rows (header first; columns from the first row unless given), capped."""
    rows = iter(itertools.islice(rows, CSV_ROW_CAP))
    first = next(rows, None)
    columns = columns or (list(first) if first is not None else [])
    if not columns:
        return iter(())
    rows = rows if first is None else itertools.chain([first], rows)
    return csv_records(columns, ([row.get(column) for column in columns] for row in rows))


# What each streamed format writes, its media type and file extension.
EXPORT_FORMATS = {
    "csv": (csv_records, "text/csv", "csv"),
    "ndjson": (ndjson_records, "application/x-ndjson", "ndjson"),
}


def table_download(
    export_format: str, columns: list[str], rows: Iterable[Sequence[Any]], filename: str
) -> StreamingHttpResponse:
    """A streamed attachment of value-list rows in a format of EXPORT_FORMATS."""
    write, media_type, extension = EXPORT_FORMATS[export_format]
    response = StreamingHttpResponse(write(columns, rows), content_type=media_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}.{extension}"'
    return response


def csv_download(
    rows: Iterable[dict[str, Any]], columns: list[str] | None, filename: str
) -> StreamingHttpResponse:
    """A streamed CSV attachment of dict rows (header first, formulas escaped, capped)."""
    response = StreamingHttpResponse(csv_lines(rows, columns), content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="{filename}.csv"'
    return response


def _listed(data: Any) -> list:
    """A list response's rows: a page's `results`, a list, or one object (an error body)."""
    if isinstance(data, dict) and "results" in data:
        return data["results"]
    return [data] if isinstance(data, dict) else list(data or [])


class _RowsRenderer(BaseRenderer):
    """A list (or a page's `results`, or an error body as one row) rendered line by line."""

    charset = "utf-8"

    def lines(self, rows: list) -> Iterable[str]:
        """The rendered lines of `rows`."""
        raise NotImplementedError

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: dict | None = None,
    ) -> str:
        """Render list data; an error body becomes one row."""
        return "".join(self.lines(_listed(data)))


class SafeCSVRenderer(_RowsRenderer):
    """`?format=csv`: a list (or a page's `results`) as CSV."""

    media_type = "text/csv"
    format = "csv"

    def lines(self, rows: list) -> Iterable[str]:
        """CSV lines, a header first (`csv_lines`)."""
        return csv_lines(rows)


class NDJSONRenderer(_RowsRenderer):
    """`?format=ndjson`: what an export streams; here an error body, one JSON line."""

    media_type = "application/x-ndjson"
    format = "ndjson"

    def lines(self, rows: list) -> Iterable[str]:
        """One JSON object a line."""
        return (JSON_LINE(row) + "\n" for row in rows)
