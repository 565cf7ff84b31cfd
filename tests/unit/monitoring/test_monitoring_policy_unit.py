"""The monitoring policy (sglang_monitoring_* variables: defaults, overrides, the errors that name a bad variable)
and what the monitoring role writes besides the rules: Prometheus's scrape config and the drift exporter's servers
(plugins/plugin_utils/sglang_alerts.Policy and plugins/plugin_utils/sglang_monitoring.py). Hosts and engines here are
synthetic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_declared import advertised as address
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_alerts import (
    POLICY_PREFIX,
    EngineTarget,
    MonitoringError,
    Policy,
    RouterTarget,
    Targets,
    policy_vars,
)
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_monitoring import (
    Scrape,
    exporter_servers,
    prometheus_config,
)

REPO = Path(__file__).resolve().parents[3]
FRACTIONS = ("kv_usage_warning", "kv_usage_critical", "running_warning", "admission_warning", "queue_warning")
KNOWN = (
    "kv_usage_warning, kv_usage_critical, running_warning, admission_warning, queue_warning, for_short, for_long, "
    "rate_window, ttft_p99_slo_s, availability_slo, drift_period_s, front_out_for"
)


def _error(values: dict[str, Any]) -> str:
    with pytest.raises(MonitoringError) as caught:
        Policy.from_vars(values)
    return str(caught.value)


# ---------------------------------------------------------------- the policy


def test_policy_defaults() -> None:
    """Warn at 90 % of the KV pool, running and admission limits and 80 % of the queue; page at 97 % of the pool."""
    p = Policy()
    assert (p.kv_usage_warning, p.kv_usage_critical, p.running_warning, p.admission_warning, p.queue_warning) == (
        0.90,
        0.97,
        0.90,
        0.90,
        0.80,
    )
    assert (p.for_short, p.for_long, p.rate_window) == ("1m", "5m", "5m")
    assert (p.ttft_p99_slo_s, p.availability_slo, p.drift_period_s) == (None, None, 60)
    assert Policy.from_vars(None) == p
    assert Policy.from_vars({}) == p


def test_policy_takes_every_setting() -> None:
    values = {
        "kv_usage_warning": 0.5,
        "kv_usage_critical": 1,
        "running_warning": 1.0,
        "admission_warning": 0.01,
        "queue_warning": 1,
        "for_short": "30s",
        "for_long": "10m",
        "rate_window": "2m",
        "ttft_p99_slo_s": 0.5,
        "availability_slo": 0.95,
        "drift_period_s": 1,
    }
    p = Policy.from_vars(values)
    assert {name: getattr(p, name) for name in values} == values


def test_unknown_setting_lists_the_known_ones() -> None:
    assert _error({"kv_usage_warnin": 0.5}) == f"sglang_monitoring_kv_usage_warnin: unknown setting; known: {KNOWN}"


@pytest.mark.parametrize("name", FRACTIONS)
@pytest.mark.parametrize("value", [0, -0.5, 1.01, 2, "0.9", None])
def test_fractions_must_lie_in_zero_one(name: str, value: Any) -> None:
    """Each warning line is a fraction of its limit in (0, 1]: zero, negatives, more than the limit and
    non-numbers are refused, naming the variable."""
    assert _error({name: value}) == (
        f"sglang_monitoring_{name}={value!r}: must be a fraction of the limit in (0, 1]; fix: e.g. 0.9"
    )


@pytest.mark.parametrize("name", ["running_warning", "admission_warning", "queue_warning", "kv_usage_critical"])
def test_a_fraction_may_be_the_whole_limit(name: str) -> None:
    assert getattr(Policy.from_vars({name: 1}), name) == 1
    assert getattr(Policy.from_vars({name: 0.999}), name) == 0.999


def test_kv_warning_must_stay_below_critical() -> None:
    assert _error({"kv_usage_warning": 0.97}) == (
        "sglang_monitoring_kv_usage_warning=0.97 must stay below sglang_monitoring_kv_usage_critical=0.97; fix: "
        "lower the warning"
    )
    assert "kv_usage_warning=1 must stay below" in _error({"kv_usage_warning": 1})
    assert "kv_usage_warning=0.8 must stay below sglang_monitoring_kv_usage_critical=0.7" in _error(
        {"kv_usage_warning": 0.8, "kv_usage_critical": 0.7}
    )
    assert Policy.from_vars({"kv_usage_warning": 0.96}).kv_usage_warning == 0.96


@pytest.mark.parametrize("value", [0, 1, 1.5, -0.1])
def test_availability_slo_lies_strictly_between_zero_and_one(value: float) -> None:
    assert _error({"availability_slo": value}) == (
        f"sglang_monitoring_availability_slo={value!r}: must lie in (0, 1); fix: e.g. 0.995"
    )


def test_availability_slo_accepted() -> None:
    assert Policy.from_vars({"availability_slo": 0.995}).availability_slo == 0.995
    assert Policy.from_vars({"availability_slo": 0.9306}).availability_slo == 0.9306
    assert Policy.from_vars({"availability_slo": None}).availability_slo is None


@pytest.mark.parametrize("value", [0, -1, 0.0])
def test_ttft_slo_must_be_positive(value: float) -> None:
    assert _error({"ttft_p99_slo_s": value}).startswith(
        f"sglang_monitoring_ttft_p99_slo_s={value!r}: must be from 0.1 to under 400 seconds"
    )


def test_ttft_slo_accepted() -> None:
    assert Policy.from_vars({"ttft_p99_slo_s": 0.5}).ttft_p99_slo_s == 0.5
    assert Policy.from_vars({"ttft_p99_slo_s": 2}).ttft_p99_slo_s == 2
    assert Policy.from_vars({"ttft_p99_slo_s": None}).ttft_p99_slo_s is None


@pytest.mark.parametrize("value", [0, -60, 1.5, "60", 60.0])
def test_drift_period_is_a_whole_number_of_seconds(value: Any) -> None:
    assert _error({"drift_period_s": value}) == f"sglang_monitoring_drift_period_s={value!r}: must be an int >= 1"


def test_drift_period_accepted() -> None:
    assert Policy.from_vars({"drift_period_s": 1}).drift_period_s == 1
    assert Policy.from_vars({"drift_period_s": 3600}).drift_period_s == 3600


def test_policy_vars_keep_only_policy_settings() -> None:
    """Only `sglang_monitoring_<Policy field>` counts; the role's other variables and other prefixes do not."""
    assert POLICY_PREFIX == "sglang_monitoring_"
    hostvars = {
        "sglang_monitoring_for_short": "15s",
        "sglang_monitoring_scrape_interval": "5s",
        "sglang_monitoring_": 1,
        "monitoring_rate_window": "2m",
        "xsglang_monitoring_for_long": "9m",
        "sglang_monitoring_drift_period_s": 15,
        "sglang_router": {"queue_size": 1},
    }
    assert policy_vars(hostvars) == {"for_short": "15s", "drift_period_s": 15}
    assert policy_vars({}) == {}


def test_the_labs_monitoring_variables_make_its_policy() -> None:
    """The lab's short windows and its TTFT SLO in lab seconds (inventories/lab/group_vars/all/monitoring.yml) reach
    the policy; the rest keep their defaults."""
    lab = yaml.safe_load((REPO / "inventories" / "lab" / "group_vars" / "all" / "monitoring.yml").read_text())
    assert Policy.from_vars(policy_vars(lab)) == Policy(
        for_short="15s", for_long="30s", rate_window="1m", drift_period_s=15, ttft_p99_slo_s=6
    )


# ---------------------------------------------------------------- scrape config and the drift exporter

# Synthetic fleet: h1 runs a prefill (bound to every address) and a decode engine (bound to loopback) and a router
# with its own metrics port; h2 runs a decode engine; h3 a router on the default metrics port.
ENGINES = [
    EngineTarget("h1", "prefill", "http://10.0.0.1:30000", {"port": 30000, "host": "0.0.0.0"}, {}),
    EngineTarget("h1", "decode", "http://10.0.0.1:30001", {"port": 30001, "host": "127.0.0.2"}, {}),
    EngineTarget("h2", "decode", "http://h2:31001", {"port": 31001}, {}),
]
ROUTERS = [RouterTarget("h1", {"prometheus_port": 29100}, 3), RouterTarget("h3", {}, 3)]
FLEET = Targets(ENGINES, ROUTERS)
HOSTVARS: dict[str, dict[str, Any]] = {
    "h1": {"sglang_advertise_host": "10.0.0.1", "ansible_host": "h1.ssh"},
    "h2": {},
    "h3": {"ansible_host": "192.168.1.3"},
}


def test_address_prefers_the_advertised_host_then_ansible_host() -> None:
    assert address("h1", HOSTVARS["h1"]) == "10.0.0.1"
    assert address("h3", HOSTVARS["h3"]) == "192.168.1.3"
    assert address("h2", {}) == "h2"
    assert address("h2", {"sglang_advertise_host": "", "ansible_host": None}) == "h2"


def test_scrape_defaults() -> None:
    s = Scrape()
    assert (s.scrape_interval, s.evaluation_interval, s.node_exporter_port) == ("15s", "15s", 9100)
    assert (s.alertmanager, s.rule_files) == ("127.0.0.1:9093", ("/etc/prometheus/sglang_rules.yml",))


def test_prometheus_config_scrapes_every_engine_router_and_engine_host() -> None:
    config = prometheus_config(FLEET, HOSTVARS, ["h1", "h2"], Scrape())
    assert config == {
        "global": {"scrape_interval": "15s", "evaluation_interval": "15s"},
        "rule_files": ["/etc/prometheus/sglang_rules.yml"],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": ["127.0.0.1:9093"]}]}]},
        "scrape_configs": [
            {
                "job_name": "sglang_engine",
                "metrics_path": "/metrics",
                "static_configs": [
                    {"targets": ["10.0.0.1:30000"], "labels": {"server": "h1:prefill", "role": "prefill"}},
                    {"targets": ["10.0.0.1:30001"], "labels": {"server": "h1:decode", "role": "decode"}},
                    {"targets": ["h2:31001"], "labels": {"server": "h2:decode", "role": "decode"}},
                ],
            },
            {
                "job_name": "sglang_router",
                "metrics_path": "/metrics",
                "static_configs": [
                    {"targets": ["10.0.0.1:29100"], "labels": {"server": "h1:router", "role": "router"}},
                    {"targets": ["192.168.1.3:29000"], "labels": {"server": "h3:router", "role": "router"}},
                ],
            },
            {
                "job_name": "sglang_drift",
                "static_configs": [
                    {"targets": ["10.0.0.1:9100"], "labels": {"host": "h1"}},
                    {"targets": ["h2:9100"], "labels": {"host": "h2"}},
                ],
                "metric_relabel_configs": [
                    {"source_labels": ["__name__"], "regex": "sglang_envelope_.*", "action": "keep"}
                ],
            },
        ],
    }


def test_router_without_an_address_is_scraped_by_its_inventory_name() -> None:
    fl = Targets(ENGINES, [RouterTarget("h2", {"prometheus_port": 29001}, 3)])
    (router,) = prometheus_config(fl, HOSTVARS, [], Scrape())["scrape_configs"][1]["static_configs"]
    assert router == {"targets": ["h2:29001"], "labels": {"server": "h2:router", "role": "router"}}


def test_prometheus_config_takes_the_scrape_settings() -> None:
    s = Scrape("5s", "10s", 9200, "10.9.9.9:9093", ("a.yml", "b.yml"))
    config = prometheus_config(FLEET, HOSTVARS, ["h2"], s)
    assert config["global"] == {"scrape_interval": "5s", "evaluation_interval": "10s"}
    assert config["rule_files"] == ["a.yml", "b.yml"]
    assert config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == ["10.9.9.9:9093"]
    assert config["scrape_configs"][2]["static_configs"] == [{"targets": ["h2:9200"], "labels": {"host": "h2"}}]
    assert len(config["scrape_configs"]) == 3  # no front: no HAProxy job


def test_a_front_adds_haproxy_s_metrics_of_each_front_host() -> None:
    s = Scrape(fronts={"f2": "10.0.0.12:8404", "f1": "10.0.0.11:8404"})
    assert prometheus_config(FLEET, HOSTVARS, ["h2"], s)["scrape_configs"][3] == {
        "job_name": "sglang_frontend",
        "metrics_path": "/metrics",
        "static_configs": [
            {"targets": ["10.0.0.11:8404"], "labels": {"host": "f1"}},
            {"targets": ["10.0.0.12:8404"], "labels": {"host": "f2"}},
        ],
    }


PLACES = {
    "bin_dir": "/b", "env_dir": "/e", "unit_dir": "/u", "facts_file": "/f/s.fact", "release_fact_file": "/f/r.fact",
    "file_modes": {name: {"owner": "root", "group": "g", "mode": "0600"} for name in ("script", "env_file", "unit")},
}  # fmt: skip


def _files(role: str) -> dict[str, dict[str, str]]:
    paths = {"script": f"/b/serve_dsv4_{role}.sh", "env_file": f"/e/dsv4-{role}.env",
             "unit": f"/u/sglang-dsv4-{role}.service"}  # fmt: skip
    return {name: {"path": path, "owner": "root", "group": "g", "mode": "0600"} for name, path in paths.items()}


def test_exporter_reads_only_its_hosts_engines_on_a_local_address() -> None:
    """A wildcard bind is read on 127.0.0.1, another bind on itself; the API key travels only as its marker; the
    files, the unit and the facts are the server layout's under the places given."""
    hv = {"sglang_model": {"params_b": 284, "quantization": "mxfp4"}, "sglang_gpu_memory_gib": 141}
    servers = exporter_servers(FLEET, "h1", hv, {"num_hidden_layers": 2}, "<set>", PLACES)
    model = {"config": {"num_hidden_layers": 2}, "gpu_memory_gib": 141, "params_b": 284, "quantization": "mxfp4"}
    assert servers == [
        {
            "server": "h1:prefill",
            "role": "prefill",
            "name": "h1",
            "endpoint": "http://127.0.0.1:30000",
            "unit": "sglang-dsv4-prefill",
            "script": "/b/serve_dsv4_prefill.sh",
            "env_file": "/e/dsv4-prefill.env",
            "facts_file": "/f/s.fact",
            "declared_files": _files("prefill"),
            "declared": {"port": 30000, "host": "0.0.0.0", "api_key": "<set>"},
            "model": model,
        },
        {
            "server": "h1:decode",
            "role": "decode",
            "name": "h1",
            "endpoint": "http://127.0.0.2:30001",
            "unit": "sglang-dsv4-decode",
            "script": "/b/serve_dsv4_decode.sh",
            "env_file": "/e/dsv4-decode.env",
            "facts_file": "/f/s.fact",
            "declared_files": _files("decode"),
            "declared": {"port": 30001, "host": "127.0.0.2", "api_key": "<set>"},
            "model": model,
        },
    ]
    (h2,) = exporter_servers(FLEET, "h2", {}, {}, None, PLACES)
    assert h2["endpoint"] == "http://127.0.0.1:31001"
    assert (h2["declared"], h2["model"]) == (
        {"port": 31001},
        {"config": {}, "gpu_memory_gib": 0, "params_b": None, "quantization": None},
    )
    assert exporter_servers(FLEET, "h3", {}, {}, "<set>", PLACES) == []
    assert "api_key" not in ENGINES[0].declared  # the declaration itself is left untouched


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("for_short", "1 min"),
        ("for_long", "1.5m"),
        ("rate_window", "0s"),
        ("front_out_for", "1h30m"),
        ("for_short", 60),
    ],
)
def test_a_policy_duration_is_one_prometheus_unit(name: str, value: object) -> None:
    """promtool check rules refuses "1 min" and "1.5m" (not a valid duration string) and a rate over 0s (parse error);
    the rule tests count a duration of one unit in minutes."""
    assert _error({name: value}).startswith(f"sglang_monitoring_{name}={value!r}: must be a Prometheus duration")


@pytest.mark.parametrize(("name", "value"), [("for_short", "0s"), ("for_long", "90s"), ("front_out_for", "1d")])
def test_a_policy_duration_prometheus_reads_is_accepted(name: str, value: str) -> None:
    assert getattr(Policy.from_vars({name: value}), name) == value
