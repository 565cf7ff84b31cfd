"""Prometheus's config from the inventory: one target per engine and router with the `server` label the rules select
on, node_exporter on every engine host for the drift exporter; promtool accepts it with the generated rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_alerts import (
    ENGINE_JOB,
    ROUTER_JOB,
    Policy,
    all_alerts,
    fleet,
    rule_file,
)
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_monitoring import (
    Scrape,
    exporter_servers,
    prometheus_config,
)
from promtools import run_promtool, write
from sglang_envelope_cli.commands import load_inventory, model_config_for

REPO = Path(__file__).resolve().parents[3]


def _config(name: str, tmp_path: Path) -> tuple[dict[str, Any], Any]:
    hostvars, groups = load_inventory(str(REPO / "inventories" / name))
    engines = groups["sglang_engine"]
    fl = fleet(hostvars, groups, model_config_for(hostvars[engines[0]]))
    rules = tmp_path / "sglang_rules.yml"
    write(rules, rule_file(all_alerts(fl, Policy())))
    return prometheus_config(fl, hostvars, engines, Scrape(rule_files=(str(rules),))), fl


def test_promtool_accepts_the_config(tmp_path: Path, promtool: str) -> None:
    for name in ("lab", "production", "multinode"):
        config, _ = _config(name, tmp_path)
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
        checked = run_promtool(promtool, "check", "config", "prometheus.yml", cwd=tmp_path)
        assert checked.returncode == 0, name + checked.stdout + checked.stderr


def test_every_server_is_a_target_with_its_label(tmp_path: Path) -> None:
    config, fl = _config("multinode", tmp_path)
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    engine_labels = {sc["labels"]["server"] for sc in jobs[ENGINE_JOB]["static_configs"]}
    assert engine_labels == {e.server for e in fl.engines} and len(engine_labels) == len(fl.engines)
    assert {sc["labels"]["server"] for sc in jobs[ROUTER_JOB]["static_configs"]} == {r.server for r in fl.routers}
    for e in fl.engines:
        target = next(
            sc["targets"][0] for sc in jobs[ENGINE_JOB]["static_configs"] if sc["labels"]["server"] == e.server
        )
        assert target.endswith(f":{e.declared['port']}")


def test_the_exporter_reads_each_engine_of_its_host() -> None:
    """Engines bound to every address are read on 127.0.0.1, as the audit role reads them."""
    hostvars, groups = load_inventory(str(REPO / "inventories" / "lab"))
    hostvars["lab1"]["sglang_engine_common"]["host"] = "0.0.0.0"  # the template ansible-inventory leaves unrendered
    fl = fleet(hostvars, groups, model_config_for(hostvars["lab1"]))
    modes = {n: {"owner": "root", "group": "root", "mode": "0600"} for n in ("script", "env_file", "unit")}
    places = {"bin_dir": "/b", "env_dir": "/e", "unit_dir": "/u", "facts_file": "/f", "release_fact_file": "/r",
              "file_modes": modes}  # fmt: skip
    servers = exporter_servers(fl, "lab1", hostvars["lab1"], {"num_hidden_layers": 1}, "<set>", places)
    assert [s["server"] for s in servers] == ["lab1:prefill", "lab1:decode"]
    assert [s["script"] for s in servers] == ["/b/serve_dsv4_prefill.sh", "/b/serve_dsv4_decode.sh"]
    assert [s["endpoint"] for s in servers] == ["http://127.0.0.1:30000", "http://127.0.0.1:30001"]
    assert all(s["declared"]["api_key"] == "<set>" and s["model"]["gpu_memory_gib"] == 141 for s in servers)
