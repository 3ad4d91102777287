"""Metric knowledge: KPI definitions with their values by period, Prometheus alerting
and recording rules, Grafana dashboards. Each is told apart by its content, not its
name: a CSV or JSON lines file with `metric` and `value` columns is a KPI file, a YAML
file with `groups[].rules` a rule file, a JSON file with `panels` (or
`dashboard.panels`) a dashboard. Live values are not read: a rule or a definition is
knowledge, a sample is not.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import date
from pathlib import Path, PurePosixPath
from typing import Any

from knowledge_api.errors import ExtractionError
from knowledge_api.ingest.extract import Extracted, literal, read_text
from knowledge_api.ingest.tables import Part, Sheet, row_sections
from knowledge_api.registry import import_extra

SOURCE_TYPE = "metrics"
METRICS_EXTRA = "metrics"
KPI_COLUMNS = ("metric", "value")
PERIOD_COLUMNS = ("period", "month", "date", "quarter", "year")
DEFINITION = ("description", "unit", "owner", "formula", "query")
QUERY_KEYS = ("expr", "rawSql", "query", "expression", "rawQuery")


def role_names(columns: list[str], roles: Mapping[str, str]) -> list[str]:
    """The columns in lower case, each column `roles` maps to named by its role (a
    column named as a role mapped elsewhere gets a `_` after its name)."""
    by_column = {column: role for role, column in roles.items()}
    names = [column.strip().lower() for column in columns]
    return [by_column.get(name, f"{name}_" if name in roles else name) for name in names]


def is_kpi(columns: list[str], roles: Mapping[str, str]) -> bool:
    names = role_names(columns, roles)
    return all(name in names for name in KPI_COLUMNS)


def as_kpi(sheet: Sheet, roles: Mapping[str, str]) -> Sheet | None:
    """The sheet with its columns named by their roles if it is a KPI file, else None."""
    if not is_kpi(sheet.header, roles):
        return None
    return Sheet(sheet.name, role_names(sheet.header, roles), sheet.rows)


def kpi_parts(sheet: Sheet) -> list[Part]:
    """One document per metric: its definition, then its values by period."""
    names = [column.strip().lower() for column in sheet.header]
    period = next((name for name in PERIOD_COLUMNS if name in names), "")
    dimensions = [
        name for name in names if name not in (*KPI_COLUMNS, period, *DEFINITION) and name
    ]
    metrics: dict[str, list[dict[str, str]]] = {}
    for record in sheet.records():
        if record.get("metric"):
            metrics.setdefault(record["metric"], []).append(record)
    return [kpi_part(metric, records, period, dimensions) for metric, records in metrics.items()]


def kpi_part(metric: str, records: list[dict[str, str]], period: str, dims: list[str]) -> Part:
    definition = {key: next((r[key] for r in records if r.get(key)), "") for key in DEFINITION}
    lines = [f"Metric: {metric}"] + [
        f"{key.capitalize()}: {value}" for key, value in definition.items() if value
    ]
    header = ([period] if period else []) + ["value", *dims]
    rows = [
        ([period_text(r.get(period, ""))] if period else [])
        + [r.get("value", "")]
        + [r.get(d, "") for d in dims]
        for r in records
    ]
    content = "\n\n".join(
        [literal("\n".join(lines)), *row_sections(header, rows, "Values by period")]
    )
    metadata = {"metric": metric, **{k: v for k, v in definition.items() if v}}
    return Part(metric, SOURCE_TYPE, Extracted(metric, content, metadata))


def period_text(period: str) -> str:
    """A YYYY-MM period with its month's name too: "2026-10 (October 2026)"."""
    try:
        month = date.fromisoformat(f"{period}-01") if len(period) == 7 else None
    except ValueError:
        month = None
    return f"{period} ({month:%B %Y})" if month else period


def jsonl_sheet(path: Path, roles: Mapping[str, str]) -> Sheet | None:
    """A JSON lines file of KPI records as a sheet; None if its first record is not one
    (a BEIR corpus, say)."""
    records: list[dict[str, Any]] = []
    for number, line in enumerate(read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            if not records:
                return None
            raise ExtractionError("bad record", f"line {number}: {e.msg}") from e
        if not isinstance(record, dict) or (not records and not is_kpi(list(record), roles)):
            return None
        records.append(record)
    if not records:
        return None
    header = list(dict.fromkeys(key for record in records for key in record))
    rows = [[scalar_text(record.get(key)) for key in header] for record in records]
    return Sheet(path.stem, header, rows)


def scalar_text(value: Any) -> str:
    return "" if value is None else str(value)


def rule_parts(path: Path) -> list[Part]:
    """A Prometheus rule file: one document per alerting or recording rule."""
    yaml = import_extra("yaml", METRICS_EXTRA)
    try:
        data = yaml.safe_load(read_text(path))
    except yaml.YAMLError as e:
        raise ExtractionError("unreadable YAML", str(e).splitlines()[0]) from e
    groups = data.get("groups") if isinstance(data, dict) else None
    if not isinstance(groups, list) or not all(
        isinstance(g, dict) and isinstance(g.get("rules"), list) for g in groups
    ):
        raise ExtractionError("unknown type", "a YAML file that is not a Prometheus rule file")
    parts: list[Part] = []
    for group in groups:
        for rule in group["rules"]:
            if isinstance(rule, dict) and (rule.get("alert") or rule.get("record")):
                parts.append(rule_part(str(group.get("name", "")), rule))
    if not parts:
        raise ExtractionError("no rules", "its groups hold no alerting or recording rule")
    return parts


def rule_part(group: str, rule: dict[str, Any]) -> Part:
    kind = "alerting" if rule.get("alert") else "recording"
    name = str(rule.get("alert") or rule.get("record"))
    labels = mapping(rule.get("labels"))
    annotations = mapping(rule.get("annotations"))
    lines = [f"{kind.capitalize()} rule {name} in group {group}."]
    if rule.get("for"):
        lines.append(f"Fires after the condition holds for {rule['for']}.")
    if labels:
        lines.append("Labels: " + ", ".join(f"{k}={v}" for k, v in labels.items()))
    text = [literal("\n".join(lines)), f"Expression:\n\n```promql\n{rule.get('expr', '')}\n```"]
    text += [literal(f"{key.capitalize()}: {value}") for key, value in annotations.items()]
    metadata: dict[str, Any] = {"rule": kind, "group": group, "name": name}
    if rule.get("for"):
        metadata["for"] = str(rule["for"])
    if labels:
        metadata["labels"] = ", ".join(f"{k}={v}" for k, v in labels.items())
    if annotations.get("runbook_url"):
        metadata["url"] = annotations["runbook_url"]
    return Part(f"{group}/{name}", SOURCE_TYPE, Extracted(name, "\n\n".join(text), metadata))


def mapping(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def dashboard_parts(path: Path, name: str) -> list[Part]:
    """An exported Grafana dashboard: one document, a section per panel."""
    try:
        data = json.loads(read_text(path))
    except json.JSONDecodeError as e:
        raise ExtractionError("unreadable JSON", f"line {e.lineno}: {e.msg}") from e
    board = data.get("dashboard", data) if isinstance(data, dict) else None
    if not isinstance(board, dict) or not isinstance(board.get("panels"), list):
        raise ExtractionError("unknown type", "a JSON file that is not a Grafana dashboard")
    meta = data.get("meta") if isinstance(data.get("meta"), dict) else {}
    folder = str(meta.get("folderTitle") or PurePosixPath(name).parent.as_posix().strip("."))
    title = str(board.get("title") or PurePosixPath(name).stem)
    tags = ", ".join(str(tag) for tag in board.get("tags") or [])
    lines = [f"Grafana dashboard {title}."]
    if board.get("description"):
        lines.append(str(board["description"]))
    if tags:
        lines.append(f"Tags: {tags}")
    sections = [literal("\n".join(lines))] + [panel_section(p) for p in panels(board["panels"])]
    metadata = {"dashboard": title, "tags": tags, "folder": folder, "uid": board.get("uid", "")}
    metadata = {key: value for key, value in metadata.items() if value}
    return [Part("", SOURCE_TYPE, Extracted(title, "\n\n".join(sections), metadata))]


def panels(found: list[Any]) -> list[dict[str, Any]]:
    """The panels in order, those of a collapsed row included."""
    flat: list[dict[str, Any]] = []
    for panel in found:
        if not isinstance(panel, dict):
            continue
        if panel.get("type") != "row":
            flat.append(panel)
        flat += panels(panel.get("panels") or [])
    return flat


def panel_section(panel: dict[str, Any]) -> str:
    lines = [f"## {' '.join(str(panel.get('title') or 'Untitled panel').split())}"]
    if panel.get("description"):
        lines.append(literal(str(panel["description"])))
    defaults = panel.get("fieldConfig", {}).get("defaults", {})
    unit = defaults.get("unit") if isinstance(defaults, dict) else None
    if panel.get("type"):
        lines.append(f"Panel type: {panel['type']}" + (f", unit: {unit}" if unit else ""))
    for target in panel.get("targets") or []:
        query = target_query(target)
        if query:
            ref = f" {target['refId']}" if target.get("refId") else ""
            lines.append(f"Query{ref}:\n\n```\n{query}\n```")
    return "\n\n".join(lines)


def target_query(target: Any) -> str:
    """A panel target's query, whatever its data source calls it (PromQL, SQL, ...)."""
    if not isinstance(target, dict):
        return ""
    return str(next((target[key] for key in QUERY_KEYS if target.get(key)), ""))
