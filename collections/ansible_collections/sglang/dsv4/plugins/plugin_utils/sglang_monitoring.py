"""What the sglang_monitoring role writes, from the inventory: Prometheus's scrape configs (every engine's /metrics,
the router's metrics port, node_exporter on every engine host for the drift exporter's textfile) and each engine
host's drift-exporter config. The rules and the dashboard come from sglang_alerts and sglang_dashboard."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_declared import advertised, model_inputs
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_layout import server_layout

from .sglang_alerts import DRIFT_JOB, ENGINE_JOB, FRONT_JOB, ROUTER_JOB, Targets


@dataclass(frozen=True)
class Scrape:
    """The role's scrape settings (sglang_monitoring_* variables)."""

    scrape_interval: str = "15s"
    evaluation_interval: str = "15s"
    node_exporter_port: int = 9100
    alertmanager: str = "127.0.0.1:9093"
    rule_files: tuple[str, ...] = ("/etc/prometheus/sglang_rules.yml",)
    # HAProxy's metrics on each front host (roles/sglang_frontend): host -> address:port; none without a front.
    fronts: Mapping[str, str] = field(default_factory=dict)


def prometheus_config(
    fl: Targets, all_hostvars: Mapping[str, Mapping[str, Any]], engine_hosts: Sequence[str], s: Scrape
) -> dict[str, Any]:
    """prometheus.yml: one target per engine and router, labelled `server` = <inventory host>:<role>."""
    engines = [
        {"targets": [e.url.removeprefix("http://")], "labels": {"server": e.server, "role": e.role}} for e in fl.engines
    ]
    routers = [
        {
            "targets": [f"{advertised(r.host, all_hostvars[r.host])}:{r.declared.get('prometheus_port', 29000)}"],
            "labels": {"server": r.server, "role": "router"},
        }
        for r in fl.routers
    ]
    nodes = [
        {"targets": [f"{advertised(h, all_hostvars[h])}:{s.node_exporter_port}"], "labels": {"host": h}}
        for h in engine_hosts
    ]
    fronts = [{"targets": [target], "labels": {"host": h}} for h, target in sorted(s.fronts.items())]
    return {
        "global": {"scrape_interval": s.scrape_interval, "evaluation_interval": s.evaluation_interval},
        "rule_files": list(s.rule_files),
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [s.alertmanager]}]}]},
        "scrape_configs": [
            {"job_name": ENGINE_JOB, "metrics_path": "/metrics", "static_configs": engines},
            {"job_name": ROUTER_JOB, "metrics_path": "/metrics", "static_configs": routers},
            {
                "job_name": DRIFT_JOB,
                "static_configs": nodes,
                # Only the drift exporter's families: node_exporter's own are not the stack's business here.
                "metric_relabel_configs": [
                    {"source_labels": ["__name__"], "regex": "sglang_envelope_.*", "action": "keep"}
                ],
            },
        ]
        + ([{"job_name": FRONT_JOB, "metrics_path": "/metrics", "static_configs": fronts}] if fronts else []),
    }


def exporter_servers(
    fl: Targets,
    host: str,
    hostvars: Mapping[str, Any],
    model_config: Mapping[str, Any],
    api_key_marker: str | None,
    places: Mapping[str, Any],
) -> list[dict[str, Any]]:
    """The drift exporter's `servers` on `host`: every engine it runs, with what the audit judges it against (the
    declaration, the API key only as the marker of a set key, the capacity-model inputs, the files' owner, group and
    mode) and where its files are (the server layout under `places`)."""
    out = []
    for e in fl.engines:
        if e.host != host:
            continue
        layout = server_layout(e.role, e.declared, places)
        out.append(
            {
                "server": e.server,
                "role": e.role,
                "name": host,
                "endpoint": layout["url"],
                "unit": layout["unit"],
                "script": layout["script"],
                "env_file": layout["env_file"],
                "facts_file": layout["facts_file"],
                "declared_files": layout["files"],
                "declared": {**e.declared, **({"api_key": api_key_marker} if api_key_marker else {})},
                "model": model_inputs(hostvars, model_config),
            }
        )
    return out
