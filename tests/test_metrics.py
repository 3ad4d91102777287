"""KPI files, Prometheus rule files and Grafana dashboards read as metrics documents,
and other CSV and Excel files as tables, all told apart by content."""

import json
from datetime import datetime
from pathlib import Path

import pytest

from knowledge_api.ingest.chunker import MAX_CHARS, chunk_document
from knowledge_api.ingest.loaders import LoadOptions, load_paths
from knowledge_api.settings import column_roles

KPIS = """metric,period,value,region,description,unit,owner
churn,2026-09,2.4,EU,Share of paying customers who cancelled in the month,%,Growth team
churn,2026-10,3.1,EU,,,
churn,2026-10,2.2,US,,,
nps,2026-10,41,EU,Net promoter score from the quarterly survey,points,CX team
"""

RULES = """groups:
  - name: checkout
    rules:
      - alert: CheckoutLatencyHigh
        expr: histogram_quantile(0.99, sum by (le) (rate(checkout_seconds_bucket[5m]))) > 0.5
        for: 10m
        labels:
          severity: page
          team: payments
        annotations:
          summary: Checkout p99 latency above 500 ms
          runbook_url: https://runbooks.example.com/checkout-latency
      - record: job:checkout_requests:rate5m
        expr: sum by (job) (rate(checkout_requests_total[5m]))
"""

DASHBOARD = {
    "meta": {"folderTitle": "Payments"},
    "dashboard": {
        "uid": "chk1",
        "title": "Checkout overview",
        "tags": ["payments", "slo"],
        "panels": [
            {
                "type": "timeseries",
                "title": "p99 latency",
                "description": "Checkout latency at the 99th percentile.",
                "fieldConfig": {"defaults": {"unit": "s"}},
                "targets": [{"refId": "A", "expr": "histogram_quantile(0.99, checkout)"}],
            },
            {
                "type": "row",
                "title": "Errors",
                "panels": [
                    {
                        "type": "stat",
                        "title": "Failed payments",
                        "targets": [{"refId": "B", "rawSql": "SELECT count(*) FROM failures"}],
                    }
                ],
            },
        ],
    },
}


def by_title(folder: Path) -> dict[str, object]:
    loaded = load_paths([folder], LoadOptions())
    assert not loaded.skipped, loaded.skipped
    return {doc.title: doc for doc in loaded}


def test_a_kpi_csv_is_a_document_per_metric_with_its_values_by_month(tmp_path: Path) -> None:
    (tmp_path / "kpis.csv").write_text(KPIS)
    docs = load_paths([tmp_path], LoadOptions()).documents
    churn, nps = docs
    owner = "Growth team"
    assert (churn.title, churn.source_type, churn.source_id) == (
        "churn",
        "metrics",
        "kpis.csv#churn",
    )
    assert churn.metadata == {
        "path": "kpis.csv",
        "format": "csv",
        "metric": "churn",
        "description": "Share of paying customers who cancelled in the month",
        "unit": "%",
        "owner": owner,
    }
    assert f"Owner: {owner}" in churn.content
    assert "| period | value | region |" in churn.content
    assert "| 2026-10 (October 2026) | 3.1 | EU |" in churn.content
    assert "## Values by period 1-3" in churn.content
    assert nps.metadata["unit"] == "points" and "CX team" in nps.content


def test_kpi_json_lines_are_read_like_a_kpi_csv(tmp_path: Path) -> None:
    records = [
        {"metric": "mrr", "period": "2026-11", "value": 120500, "unit": "EUR"},
        {"metric": "mrr", "period": "2026-12", "value": 131000},
    ]
    (tmp_path / "finance.jsonl").write_text("\n".join(json.dumps(r) for r in records))
    (doc,) = load_paths([tmp_path], LoadOptions()).documents
    assert doc.source_type == "metrics" and doc.metadata["unit"] == "EUR"
    assert "| 2026-12 (December 2026) | 131000 |" in doc.content


def test_a_rule_file_is_a_document_per_rule_its_runbook_the_link(tmp_path: Path) -> None:
    pytest.importorskip("yaml", reason="pip install 'knowledge-api[metrics]'")
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "checkout.yml").write_text(RULES)
    docs = by_title(tmp_path)
    alert = docs["CheckoutLatencyHigh"]
    assert alert.source_id == "rules/checkout.yml#checkout/CheckoutLatencyHigh"
    assert alert.metadata == {
        "path": "rules/checkout.yml",
        "format": "yml",
        "rule": "alerting",
        "group": "checkout",
        "name": "CheckoutLatencyHigh",
        "for": "10m",
        "labels": "severity=page, team=payments",
        "url": "https://runbooks.example.com/checkout-latency",
    }
    assert "rate(checkout_seconds_bucket[5m])" in alert.content
    assert "Summary: Checkout p99 latency above 500 ms" in alert.content
    record = docs["job:checkout_requests:rate5m"]
    assert record.metadata["rule"] == "recording" and record.source_type == "metrics"


def test_a_grafana_dashboard_is_a_document_with_a_section_per_panel(tmp_path: Path) -> None:
    (tmp_path / "checkout.json").write_text(json.dumps(DASHBOARD))
    (tmp_path / "plain.json").write_text('{"name": "not a dashboard"}')
    loaded = load_paths([tmp_path], LoadOptions())
    assert [(s.reason, s.detail) for s in loaded.skipped] == [
        ("unknown type", "a JSON file that is not a Grafana dashboard")
    ]
    (doc,) = loaded.documents
    assert (doc.title, doc.source_type) == ("Checkout overview", "metrics")
    assert doc.metadata["folder"] == "Payments" and doc.metadata["tags"] == "payments, slo"
    sections = {chunk.section for chunk in chunk_document(doc)}
    assert {"p99 latency", "Failed payments"} <= sections
    assert "Panel type: timeseries, unit: s" in doc.content
    assert "SELECT count(*) FROM failures" in doc.content


def test_other_csv_is_a_table_whose_sections_repeat_the_header(tmp_path: Path) -> None:
    header = "host,region,owner,purpose"
    rows = [
        f"db-{n:03d},eu-west-{n % 3},team-{n % 7},replica number {n} of the ledger"
        for n in range(200)
    ]
    (tmp_path / "hosts.csv").write_text("\n".join([header, *rows]))
    (doc,) = load_paths([tmp_path], LoadOptions()).documents
    assert (doc.title, doc.source_type) == ("hosts", "wiki")
    assert doc.metadata["rows"] == 200
    chunks = chunk_document(doc)
    assert len(chunks) > 5
    for chunk in chunks:
        assert chunk.content.startswith("| host | region | owner | purpose |")
        assert len(chunk.content) <= MAX_CHARS
    assert chunks[0].section == "Rows 1-" + chunks[0].section.split("-")[1]
    assert "db-199" in chunks[-1].content


def test_an_excel_workbook_is_a_document_per_sheet(tmp_path: Path) -> None:
    openpyxl = pytest.importorskip("openpyxl", reason="pip install 'knowledge-api[tables]'")
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    sheet.title = "Vendors"
    sheet.append(["vendor", "contract ends", "annual cost"])
    sheet.append(["Acme Hosting", datetime(2027, 3, 31), 12000])
    prices = workbook.create_sheet("KPIs")
    prices.append(["metric", "period", "value"])
    prices.append(["uptime", "2026-10", 99.95])
    workbook.create_sheet("Empty")
    workbook.save(tmp_path / "ops.xlsx")
    docs = by_title(tmp_path)
    assert sorted(docs) == ["ops", "uptime"]
    vendors = docs["ops"]
    assert "| Acme Hosting | 2027-03-31 | 12000 |" in vendors.content
    assert docs["uptime"].source_type == "metrics"
    assert "| 2026-10 (October 2026) | 99.95 |" in docs["uptime"].content


def test_kpi_columns_named_otherwise_are_mapped_by_the_setting(tmp_path: Path) -> None:
    (tmp_path / "finance.csv").write_text(
        "kpi,month,amount,value\nrevenue,2026-10,88000,high\nrevenue,2026-11,91000,high\n"
    )
    table = load_paths([tmp_path], LoadOptions()).documents
    assert [doc.source_type for doc in table] == ["wiki"]  # no metric column: a table
    roles = column_roles("metric=KPI, period=Month, value=Amount")
    assert roles is not None
    (doc,) = load_paths([tmp_path], LoadOptions(kpi_columns=roles)).documents
    assert (doc.title, doc.source_type) == ("revenue", "metrics")
    assert "| period | value | value_ |" in doc.content
    assert "| 2026-11 (November 2026) | 91000 | high |" in doc.content
