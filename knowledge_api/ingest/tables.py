"""Spreadsheets as documents: a CSV file or an Excel sheet (.xlsx, read with openpyxl,
the `tables` extra) is a document whose rows are Markdown tables, as many rows to a
section as fit in a passage, each section with the header again: a passage found
alone still says what its columns are.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, time
from pathlib import Path
from typing import Any

from knowledge_api.errors import ExtractionError
from knowledge_api.ingest.chunker import MAX_CHARS
from knowledge_api.ingest.extract import Extracted, markdown_table, read_text
from knowledge_api.registry import import_extra

TABLES_EXTRA = "tables"
CSV = (".csv", ".tsv")
XLSX = (".xlsx",)
SHEETS = CSV + XLSX
SECTION_CHARS = MAX_CHARS - 50
"""Room for a section's rows, the header included: a section is one passage."""


@dataclass(frozen=True)
class Part:
    """One document of a file that holds several: `key` tells it apart in its source
    id (`path#key`), `source_type` is its kind's default."""

    key: str
    source_type: str
    extracted: Extracted


@dataclass(frozen=True)
class Sheet:
    name: str
    header: list[str]
    rows: list[list[str]] = field(default_factory=list)

    def records(self) -> Iterator[dict[str, str]]:
        names = [name.strip().lower() for name in self.header]
        for row in self.rows:
            yield dict(zip(names, row, strict=False))


def csv_sheet(path: Path) -> Sheet:
    """The rows of a CSV file (UTF-8; comma, semicolon or tab separated)."""
    text = read_text(path)
    try:
        dialect: Any = csv.Sniffer().sniff(text[:8192], delimiters=",;\t")
    except csv.Error:
        dialect = "excel-tab" if path.suffix.lower() == ".tsv" else "excel"
    try:
        rows = [[cell.strip() for cell in row] for row in csv.reader(io.StringIO(text), dialect)]
    except csv.Error as e:
        raise ExtractionError("unreadable CSV", str(e)) from e
    rows = [row for row in rows if any(row)]
    if not rows:
        raise ExtractionError("empty table", "no rows")
    return Sheet(path.stem, rows[0], rows[1:])


def xlsx_sheets(path: Path) -> list[Sheet]:
    """The sheets of a workbook that hold rows, values as Excel shows them last saved
    (formulas by their cached value)."""
    openpyxl = import_extra("openpyxl", TABLES_EXTRA)
    try:
        workbook = openpyxl.load_workbook(path, read_only=True, data_only=True)
    except Exception as e:  # openpyxl raises many kinds on a damaged file
        raise ExtractionError("unreadable XLSX", f"{type(e).__name__}: {e}") from e
    sheets = []
    try:
        for worksheet in workbook.worksheets:
            rows = [
                [cell_text(value) for value in row] for row in worksheet.iter_rows(values_only=True)
            ]
            rows = [row for row in rows if any(row)]
            if rows:
                sheets.append(Sheet(worksheet.title, rows[0], rows[1:]))
    finally:
        workbook.close()
    return sheets


def cell_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):  # a date cell: its time only when it has one
        return value.date().isoformat() if value.time() == time() else value.isoformat(" ")
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return " ".join(str(value).split())


def table_part(sheet: Sheet, title: str, key: str = "") -> Part:
    content = "\n\n".join(row_sections(sheet.header, sheet.rows, "Rows"))
    metadata = {"sheet": sheet.name, "rows": len(sheet.rows), "columns": len(sheet.header)}
    return Part(key, "wiki", Extracted(title, content, metadata))


def row_sections(header: list[str], rows: list[list[str]], label: str) -> Iterator[str]:
    """The rows as `## label a-b` sections of Markdown tables, the header in each."""
    start = 0
    while start < len(rows):
        end = start + 1
        while end < len(rows) and len(markdown_table([header, *rows[start : end + 1]])) <= (
            SECTION_CHARS
        ):
            end += 1
        span = f"{start + 1}" if end == start + 1 else f"{start + 1}-{end}"
        yield f"## {label} {span}\n\n{markdown_table([header, *rows[start:end]])}"
        start = end


def sheets(path: Path, suffix: str) -> list[Sheet]:
    """The sheets of a CSV file (one) or a workbook (those that hold rows)."""
    if suffix in CSV:
        return [csv_sheet(path)]
    found = xlsx_sheets(path)
    if not found:
        raise ExtractionError("empty table", "no sheet holds rows")
    return found


def table_parts(sheets: list[Sheet], title: str) -> list[Part]:
    """A document per sheet, told apart by its name (`path#sheet`) when there are several."""
    if len(sheets) == 1:
        return [table_part(sheets[0], title)]
    return [table_part(sheet, f"{title}: {sheet.name}", key=sheet.name) for sheet in sheets]
