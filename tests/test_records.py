"""How a stored row's document dates are read back into a hit."""

from __future__ import annotations

from datetime import UTC, datetime

from knowledge_api.stores.records import stored_date


def test_dates_read_back_as_iso_8601_to_the_second() -> None:
    at = datetime(2026, 3, 4, 5, 6, 7, 890000, tzinfo=UTC)
    assert stored_date({"created_at": at}, "created_at") == "2026-03-04T05:06:07+00:00"
    text = "2026-03-04T05:06:07.890+00:00"  # as PostgREST sends a timestamptz
    assert stored_date({"created_at": text}, "created_at") == "2026-03-04T05:06:07+00:00"


def test_a_missing_or_unreadable_date_is_no_error() -> None:
    """A row without the date, with none, or with text that is no date (an imported
    file's) reads back as empty or as stored, never as an error of the search."""
    assert stored_date({}, "created_at") == ""
    assert stored_date({"created_at": None}, "created_at") == ""
    assert stored_date({"created_at": ""}, "created_at") == ""
    assert stored_date({"created_at": "last week"}, "created_at") == "last week"
