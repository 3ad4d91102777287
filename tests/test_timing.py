"""Durations as responses and log lines write them (knowledge_api/timing.py)."""

from __future__ import annotations

from knowledge_api.timing import Spelled


def test_durations_are_spelled_as_the_rounded_float_json_writes() -> None:
    tenths, thousandths = Spelled(1, repr), Spelled(3, lambda ms: repr(ms).encode())
    for ms in (0.0, 0.04, 0.0512, 0.26, 1.0, 12.3456, 99.99, 1234.56789):
        assert tenths(ms) == repr(round(ms, 1)) and tenths.rounded(ms) == round(ms, 1)
        assert thousandths(ms) == repr(round(ms, 3)).encode()
    assert tenths(0.25) == "0.3" and tenths.rounded(0.25) == 0.3  # a half rounds up
    assert tenths(0.04) is tenths(0.0400001)  # spelled once for the same tenth


def test_spelled_forgets_past_its_bound() -> None:
    spelled = Spelled(3, repr)
    spelled.MAX_KNOWN = 3
    for ms in (0.001, 0.002, 0.003, 0.004):
        spelled(ms)
    assert list(spelled.known) == [4] and spelled(0.002) == "0.002"
