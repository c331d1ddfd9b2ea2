"""Operators' metrics (docs/operations.md): the fleet gauges the database computes (worker_api.fleet_metrics),
the worker's /metrics, each series served once by `serve all`, an event stream's life apart from request
latency, and the shipped alert rules and Grafana dashboard naming only metrics the processes serve."""

from __future__ import annotations

import json
import re
import socket
import ssl
import subprocess
from collections import Counter
from pathlib import Path

import httpx
import psycopg
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import Dashboard
from prometheus_client.parser import text_string_to_metric_families
from psycopg.types.json import Jsonb

from better_compute.db import Database
from fleet import WHOLE, make_pool
from gateway_support import REPO, running_worker_process
from relay_support import headers
from test_serve_all import TENANT, TOKEN, serving_all

ALERTS = REPO / "deploy" / "prometheus" / "alerts.yml"
ALERT_TESTS = REPO / "deploy" / "prometheus" / "alerts_test.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "better-compute.json"
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",), "info": ("_info",),
            "summary": ("", "_count", "_sum"), "unknown": ("",)}
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
                "offset", "le", "inf", "nan"}


def fleet_series(db: Database) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {(row["metric"], frozenset(row["labels"].items())): row["value"] for row in db.rows("worker_api.fleet_metrics")}


def test_fleet_gauges_count_gpus_by_pool_and_state_and_the_queues(sql: psycopg.Connection, wdb: Database) -> None:
    pool_id = make_pool(sql, [[WHOLE, WHOLE], [WHOLE, WHOLE]])
    pool = sql.execute("SELECT s.name || '/' || p.name FROM compute.pools p JOIN compute.sites s USING (site_id) "
                       "WHERE p.pool_id = %s", (pool_id,)).fetchone()[0]
    end = sql.execute("SELECT compute.compute_now() + interval '1 hour'").fetchone()[0]
    request = {"tenant_id": TENANT, "pool_id": str(pool_id), "shape": "gpu", "count": 1, "end": end.isoformat()}
    sql.execute("SELECT compute.reserve(%s)", (Jsonb(request),))  # pack: node 1's first GPU
    node_2 = sql.execute("SELECT node_id FROM compute.nodes WHERE pool_id = %s ORDER BY rank DESC LIMIT 1",
                         (pool_id,)).fetchone()[0]
    sql.execute("SELECT compute.node_flag_set(%s, 'cordoned', 'test', 'maintenance')", (node_2,))
    sql.execute("SELECT compute.work_poke('test.kind', 'a', '{}', compute.compute_now() - interval '90 seconds')")

    series = fleet_series(wdb)

    def gpus(state: str) -> float:
        return series[("bc_fleet_gpus", frozenset({("pool", pool), ("state", state)}))]
    assert (gpus("held"), gpus("flagged"), gpus("disconnected"), gpus("free"), gpus("absent")) == (1, 2, 1, 0, 0)
    assert series[("bc_fleet_nodes", frozenset({("pool", pool), ("session", "never")}))] == 2
    assert series[("bc_fleet_work_items", frozenset({("kind", "test.kind"), ("state", "pending")}))] == 1
    assert series[("bc_fleet_work_overdue_seconds", frozenset({("kind", "test.kind")}))] >= 90
    assert series[("bc_fleet_webhook_deliveries_pending", frozenset())] == 0
    assert ("bc_fleet_admissions_pending", frozenset()) in series


def test_fleet_gauges_name_no_more_pools_than_metric_label_values(sql: psycopg.Connection, wdb: Database) -> None:
    for _ in range(3):
        make_pool(sql, [[WHOLE]])
    sql.execute("UPDATE compute.limits SET value = 2 WHERE name = 'metric_label_values'")
    pools = {dict(labels)["pool"] for name, labels in fleet_series(wdb) if name == "bc_fleet_gpus"}
    assert len(pools) == 2


def scrape(url: str, verify: ssl.SSLContext | bool = True) -> str:
    response = httpx.get(url, verify=verify, timeout=10)
    response.raise_for_status()
    return response.text


def series_of(text: str) -> list[tuple[str, frozenset[tuple[str, str]]]]:
    return [(sample.name, frozenset(sample.labels.items()))
            for family in text_string_to_metric_families(text) for sample in family.samples]


def names_served(*texts: str) -> set[str]:
    """Every sample name a served family may have (a counter's _total, a histogram's _bucket...), even one
    with no sample yet (a labelled counter nothing has counted)."""
    return {family.name + suffix for text in texts for family in text_string_to_metric_families(text)
            for suffix in SUFFIXES[family.type]}


def samples(text: str, name: str) -> list[float]:
    return [sample.value for family in text_string_to_metric_families(text) for sample in family.samples
            if sample.name == name]


def names_in(expression: str) -> set[str]:
    """The metric names a PromQL expression reads: identifiers not followed by "(" and outside {...} and
    [...], less PromQL's words."""
    bare = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\"[^\"]*\"", " ", expression)
    bare = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", bare)
    return {word for word in re.findall(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()", bare)
            if word not in PROMQL_WORDS and not re.fullmatch(r"\d+[smhdwy]?|e\d+", word)}


def dashboard_expressions() -> list[str]:
    document = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in document["panels"] for target in panel.get("targets", ())]


def alert_expressions() -> list[str]:
    found = re.findall(r"^\s*expr:\s*(.+)$", ALERTS.read_text(), flags=re.MULTILINE)
    return [expression.strip().strip("'\"") for expression in found]


def kept(written: object, read: object, path: str = "") -> list[str]:
    """Where `read` lacks or changes what `written` has (more fields in `read` are fine)."""
    if isinstance(written, dict) and isinstance(read, dict):
        return [lost for key, value in written.items()
                for lost in (kept(value, read[key], f"{path}.{key}") if key in read else [f"{path}.{key}"])]
    if isinstance(written, list) and isinstance(read, list) and len(written) == len(read):
        return [lost for index, pair in enumerate(zip(written, read)) for lost in kept(*pair, f"{path}[{index}]")]
    return [] if written == read else [path]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_each_process_serves_each_series_once_and_the_shipped_rules_name_only_those(
        sql: psycopg.Connection, db_dsn: str, tmp_path: Path) -> None:
    make_pool(sql, [[WHOLE]])  # the per-pool gauges have a pool to count
    with serving_all(db_dsn, tmp_path) as served:
        with httpx.stream("GET", served.relay.url + "/api/compute/watch",
                          headers=headers(TOKEN, TENANT), timeout=10) as stream:
            assert stream.status_code == 200
        relay_text = scrape(served.relay.url + "/metrics")
        gateway_text = scrape(served.url.replace("wss://", "https://", 1) + "/metrics", ssl.create_default_context(cafile=served.ca_path))
    port = free_port()
    with running_worker_process(db_dsn, tmp_path / "keys", ["--metrics-port", str(port)]):
        worker_text = scrape(f"http://127.0.0.1:{port}/metrics")

    # serve all: every series once over its two endpoints, the process's own on the relay's only.
    counted = Counter(series_of(relay_text) + series_of(gateway_text))
    assert [series for series, times in counted.items() if times > 1] == []
    assert any(name == "process_cpu_seconds_total" for name, _ in series_of(relay_text))
    assert not any(name.startswith(("process_", "python_")) for name, _ in series_of(gateway_text))
    assert any(name == "bc_fleet_gpus" or name == "bc_fleet_admissions_pending" for name, _ in series_of(relay_text))
    # The stream's life is not a request's latency.
    assert not any(name.startswith("bc_relay_request_seconds") and ("method", "watch") in labels
                   for name, labels in series_of(relay_text))
    assert samples(relay_text, "bc_relay_event_stream_seconds_count") == [1.0]
    # The worker alone: its own work, the fleet and the process.
    worker_names = {name for name, _ in series_of(worker_text)}
    assert {"process_cpu_seconds_total", "bc_fleet_admissions_pending", "bc_worker_items_running"} <= worker_names
    assert Counter(series_of(worker_text)).most_common(1)[0][1] == 1

    served_names = names_served(relay_text, gateway_text, worker_text) | {"up"}
    for expression in dashboard_expressions() + alert_expressions():
        assert names_in(expression) <= served_names, f"{expression!r} names what no process serves"


def test_the_dashboard_is_what_grafanas_dashboard_schema_reads() -> None:
    """Read into the types of Grafana's dashboard schema and written back (with the schema's defaults
    added), the dashboard keeps every field: none is one the schema does not know (it would be dropped)."""
    document = json.loads(DASHBOARD.read_text())
    again = json.loads(json.dumps(Dashboard.from_json(document), cls=JSONEncoder))
    assert kept(document, again) == []
    assert {"title", "panels", "schemaVersion", "uid"} <= document.keys()
    assert all({"type", "title", "gridPos"} <= panel.keys() for panel in document["panels"])
    assert len(dashboard_expressions()) >= 8


def test_promtool_checks_the_alert_rules_their_tests_and_the_example_configuration() -> None:
    for command in (["promtool", "check", "rules", ALERTS.name], ["promtool", "test", "rules", ALERT_TESTS.name],
                    ["promtool", "check", "config", "prometheus.yml"]):
        result = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=ALERTS.parent)
        assert result.returncode == 0, result.stdout + result.stderr
