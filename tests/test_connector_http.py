"""The retry policy every connector's HTTP calls share."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import httpx
import pytest

from knowledge_api.connectors.http import Retries, SourceHTTP, retry_after
from knowledge_api.errors import ConnectorFailed


def client(answers: list[httpx.Response], waits: list[float], attempts: int = 5) -> SourceHTTP:
    calls = iter(answers)

    def handle(request: httpx.Request) -> httpx.Response:
        return next(calls)

    return SourceHTTP(
        "http://vendor.test",
        headers={"Authorization": "Bearer s3cret"},
        retries=Retries(attempts=attempts, sleep=waits.append),
        transport=httpx.MockTransport(handle),
    )


def test_a_429_waits_what_retry_after_says_clamped_to_a_minute() -> None:
    waits: list[float] = []
    http = client(
        [
            httpx.Response(429, headers={"Retry-After": "3"}),
            httpx.Response(503, headers={"Retry-After": "600"}),
            httpx.Response(429, headers={"Retry-After": "0"}),
            httpx.Response(200, json={"ok": True}),
        ],
        waits,
    )
    assert http.get_json("/items") == {"ok": True}
    assert waits == [3.0, 60.0, 1.0]


def test_other_server_errors_back_off_and_give_up_after_the_retries() -> None:
    waits: list[float] = []
    http = client([httpx.Response(502)] * 3, waits, attempts=2)
    with pytest.raises(ConnectorFailed) as e:
        http.get_json("/items")
    assert "answered 502, 3 tries" in e.value.message
    assert len(waits) == 2 and all(0 <= w <= 30 for w in waits)


@pytest.mark.parametrize("status", [401, 403, 404, 410])
def test_refusals_stop_at_once_naming_the_reason_and_no_secret(status: int) -> None:
    waits: list[float] = []
    http = client([httpx.Response(status)], waits)
    with pytest.raises(ConnectorFailed) as e:
        http.get_json("/items")
    assert f"({status})" in e.value.message and "s3cret" not in e.value.message
    assert waits == []


def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert retry_after("7") == 7.0
    assert retry_after("") is None and retry_after("soon") is None
    later = retry_after("Wed, 21 Oct 2099 07:28:00 GMT")
    assert later is not None and later > 0


def test_a_rate_limited_403_waits_for_the_quota_instead_of_stopping() -> None:
    waits: list[float] = []
    reset = str(int(time.time()) + 30)
    spent = {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": reset}
    http = client(
        [
            httpx.Response(403, headers=spent, json={"message": "API rate limit exceeded"}),
            httpx.Response(403, headers={"Retry-After": "7"}, json={"message": "secondary"}),
            httpx.Response(403, json={"message": "You have exceeded a secondary rate limit"}),
            httpx.Response(200, json={"ok": True}),
        ],
        waits,
    )
    assert http.get_json("/items") == {"ok": True}
    assert 25 <= waits[0] <= 31 and waits[1] == 7.0 and 0 <= waits[2] <= 30


def test_a_quota_that_comes_back_too_late_stops_the_run_saying_when() -> None:
    waits: list[float] = []
    reset = int(time.time()) + 3600
    spent = {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(reset)}
    http = client([httpx.Response(403, headers=spent)], waits)
    with pytest.raises(ConnectorFailed) as e:
        http.get_json("/items")
    back = datetime.fromtimestamp(reset, UTC).isoformat(timespec="seconds")
    assert back in e.value.message and "rate limit" in e.value.message and waits == []


def test_pages_follow_the_link_header() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        page = int(request.url.params.get("page", "1"))
        link = f'<http://vendor.test/items?page={page + 1}>; rel="next"' if page < 3 else ""
        return httpx.Response(200, json=[page], headers={"Link": link} if link else {})

    http = SourceHTTP("http://vendor.test", transport=httpx.MockTransport(handle))
    assert list(http.pages("/items", {"per_page": 1})) == [[1], [2], [3]]


def test_a_page_that_keeps_failing_is_asked_for_in_halves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    items = list(range(1, 11))
    asked: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        asked.append(str(request.url.query, "ascii"))
        size, page = int(request.url.params["per_page"]), int(request.url.params.get("page", 1))
        if size > 2:  # too heavy for the server at that size
            return httpx.Response(502)
        rows = items[(page - 1) * size : page * size]
        more = page * size < len(items)
        link = f'<http://vendor.test/items?per_page={size}&page={page + 1}>; rel="next"'
        return httpx.Response(200, json=rows, headers={"Link": link} if more else {})

    waits: list[float] = []
    http = SourceHTTP(
        "http://vendor.test",
        retries=Retries(attempts=1, sleep=waits.append),
        transport=httpx.MockTransport(handle),
    )
    monkeypatch.setattr("knowledge_api.connectors.http.SMALLEST_PAGE", 2)
    found = [row for page in http.pages("/items", {"per_page": 8}) for row in page]
    assert found == items
    assert asked[:5] == ["per_page=8"] * 2 + ["per_page=4"] * 2 + ["per_page=2"]
    assert asked[5:] == [f"per_page=2&page={n}" for n in range(2, 6)]


def test_a_page_failing_at_every_size_stops_the_run() -> None:
    waits: list[float] = []
    http = client([httpx.Response(503)] * 9, waits, attempts=2)
    with pytest.raises(ConnectorFailed) as e:
        list(http.pages("/items", {"per_page": 40}))
    assert "answered 503, 3 tries" in e.value.message and len(waits) == 6


def test_a_later_page_asked_for_in_halves_goes_on_where_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    items = list(range(1, 11))

    def handle(request: httpx.Request) -> httpx.Response:
        size, page = int(request.url.params["per_page"]), int(request.url.params.get("page", 1))
        if size == 4 and page == 2:
            return httpx.Response(504)
        rows = items[(page - 1) * size : page * size]
        link = f'<http://vendor.test/items?per_page={size}&page={page + 1}>; rel="next"'
        more = page * size < len(items)
        return httpx.Response(200, json=rows, headers={"Link": link} if more else {})

    http = SourceHTTP(
        "http://vendor.test",
        retries=Retries(attempts=0, sleep=lambda seconds: None),
        transport=httpx.MockTransport(handle),
    )
    monkeypatch.setattr("knowledge_api.connectors.http.SMALLEST_PAGE", 2)
    assert [row for page in http.pages("/items", {"per_page": 4}) for row in page] == items


def test_statuses_taken_as_answers_are_returned_as_they_are() -> None:
    waits: list[float] = []
    http = client([httpx.Response(404), httpx.Response(429), httpx.Response(410)], waits)
    assert http.request("GET", "/page", answers={404, 410}).status_code == 404
    assert http.request("GET", "/page", answers={404, 410}).status_code == 410
    assert len(waits) == 1  # the 429 between them was tried again


def test_a_refused_request_says_the_services_reason_and_keeps_its_status() -> None:
    waits: list[float] = []
    said = {"errorMessages": ["The value 'OSP' does not exist for the field 'project'."]}
    http = client([httpx.Response(400, json=said)], waits)
    with pytest.raises(ConnectorFailed) as e:
        http.get_json("/search")
    assert "answered 400: " in e.value.message and "'OSP' does not exist" in e.value.message
    assert e.value.details["status"] == 400 and waits == []
    http = client([httpx.Response(503)] * 2, waits, attempts=1)
    with pytest.raises(ConnectorFailed) as e:
        http.get_json("/search")
    assert e.value.details["status"] == 503
