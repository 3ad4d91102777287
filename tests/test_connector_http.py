"""The retry policy every connector's HTTP calls share."""

from __future__ import annotations

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
