"""The command line (cli/sglang_envelope_cli/commands.py), run in-process: each subcommand's exact output, files and
exit status, its errors, and the argument parser. Inventories are resolved once by ansible-inventory and reused."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sglang_envelope_cli.commands as cli
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_schema import EnvelopeError
from shipped import shipped_inventory

REPO = Path(__file__).resolve().parents[2]
Inventory = tuple[dict[str, dict[str, Any]], dict[str, list[str]]]


@pytest.fixture
def inventories(monkeypatch: pytest.MonkeyPatch) -> Callable[[dict[str, Inventory]], None]:
    """Serve the command's --inventory argument from a table (exact names only) instead of ansible-inventory."""

    def install(table: dict[str, Inventory]) -> None:
        def load(inventory: str) -> Inventory:
            return copy.deepcopy(table[inventory])

        monkeypatch.setattr(cli, "load_inventory", load)

    return install


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `sglang-envelope ARGV`."""
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def with_var(inv: Inventory, host: str, var: str, **changes: Any) -> Inventory:
    """A synthetic variant of an inventory: `changes` merged into one host's dict variable."""
    hostvars, groups = copy.deepcopy(inv)
    hostvars[host][var] = {**hostvars[host].get(var, {}), **changes}
    return hostvars, groups


def without_groups(inv: Inventory, *names: str) -> Inventory:
    """A synthetic variant of an inventory with some groups removed."""
    hostvars, groups = copy.deepcopy(inv)
    return hostvars, {k: v for k, v in groups.items() if k not in names}


# Production figures (docs/capacity.md: KV pools 9,927,680 / 11,159,040 tokens, 256 / 64 running requests, 18 / 21
# calls at the full 524,288-token context, bf16 index keys cost 8.4 %). Rows: floor(pool / context), capped by the
# router's 64 or max_running_requests; weights per GPU 284e9 x (0.5 + 1/32) bytes / tp 4 = 35.1 GiB.

# The fleet answer, first: short calls are held by the router's 64 and the decode engine's 64 running requests alike;
# at the full context the decode pool holds floor(11,159,040 / 524,288) = 21; the router queues 256 for 60 s.
FLEET = (
    "## Fleet\n"
    "\n"
    "- parallel calls: 64, bound by router max_concurrent_requests = decode fleet max_running_requests\n"
    "- parallel calls at the full context of 524288 tokens: 21, bound by decode KV pools at full context\n"
    "- router: 64 in flight, then 256 queued for up to 60 s, then 429\n"
    "- per-call context: 524288 tokens; total context (decode KV pools): 11159040 tokens\n"
    "- decode fleet (1 engine): runs 64 requests at once; 21 at the full context of 524288 tokens\n"
)

PREFILL_TABLE = (
    "## gpu-node-01 prefill\n"
    "\n"
    "- per-call context: 524288 tokens (max_req_input_len 524282)\n"
    "- total context (KV pool): 9927680 tokens, page 256\n"
    "- parallel calls (max_running_requests): 256\n"
    "- KV bytes per token per GPU: 7737.8; request-scoped bytes: 2.53 GiB; weights per GPU: 35.1 GiB\n"
    "- bf16 index keys: on; they cost 8.4 % of KV tokens\n"
    "\n"
    "| context | fit in KV pool | run at once | binding limit | fit with fp8 index keys | lost to bf16 keys |\n"
    "|---:|---:|---:|---|---:|---:|\n"
    "| 4096 | 2423 | 64 | router | 2646 | 223 |\n"
    "| 8192 | 1211 | 64 | router | 1323 | 112 |\n"
    "| 32768 | 302 | 64 | router | 330 | 28 |\n"
    "| 65536 | 151 | 64 | router | 165 | 14 |\n"
    "| 131072 | 75 | 64 | router | 82 | 7 |\n"
    "| 262144 | 37 | 37 | kv_pool | 41 | 4 |\n"
    "| 524288 | 18 | 18 | kv_pool | 20 | 2 |\n"
)

DECODE_TABLE = (
    "## gpu-node-01 decode\n"
    "\n"
    "- per-call context: 524288 tokens (max_req_input_len 524282)\n"
    "- total context (KV pool): 11159040 tokens, page 256\n"
    "- parallel calls (max_running_requests): 64\n"
    "- KV bytes per token per GPU: 7737.8; request-scoped bytes: 0.65 GiB; weights per GPU: 35.1 GiB\n"
    "- bf16 index keys: on; they cost 8.4 % of KV tokens\n"
    "\n"
    "| context | fit in KV pool | run at once | binding limit | fit with fp8 index keys | lost to bf16 keys |\n"
    "|---:|---:|---:|---|---:|---:|\n"
    "| 4096 | 2421 | 64 | max_running_requests | 2644 | 223 |\n"
    "| 8192 | 1282 | 64 | max_running_requests | 1399 | 117 |\n"
    "| 32768 | 335 | 64 | max_running_requests | 366 | 31 |\n"
    "| 65536 | 168 | 64 | max_running_requests | 184 | 16 |\n"
    "| 131072 | 84 | 64 | max_running_requests | 92 | 8 |\n"
    "| 262144 | 42 | 42 | kv_pool | 46 | 4 |\n"
    "| 524288 | 21 | 21 | kv_pool | 23 | 2 |\n"
)

RISKS = (
    "## Risks (from the declared values)\n"
    "\n"
    "    warn: router_admits_beyond_full_context: the router admits 64 parallel calls, but the decode fleet holds "
    "21 at 524,286 tokens each (full context): the rest wait or are retracted inside the engines, where the router "
    "cannot see them [router_max_concurrent_requests=64, decode_holds=21, tokens_per_call=524286]\n"
    "      fix (add 2 decode hosts, decode mem_fraction_static 0.929 (SGLang's own choice on this GPU), passes "
    "validation):\n"
    "        inventory: add host gpu-node-01-decode2 (a copy of gpu-node-01's decode engine, 1 of 2) to group "
    "sglang_decode\n"
    "        inventory: add host gpu-node-01-decode3 (a copy of gpu-node-01's decode engine, 2 of 2) to group "
    "sglang_decode\n"
    "        gpu-node-01: sglang_advertise_host: 127.0.0.1 -> gpu-node-01 (an address the new hosts reach)\n"
    "        sglang_decode.mem_fraction_static: 0.83 -> 0.929\n"
    "      fix (admit only what the decode fleet holds at 524,286 tokens, passes validation):\n"
    "        sglang_router.max_concurrent_requests: 64 -> 21\n"
    "    warn: single_decode_engine: one decode engine: it cannot be drained, so any change of an engine limit is "
    "an outage for the fleet [decode_engines=1]\n"
    "      fix (a second decode engine, passes validation):\n"
    "        inventory: add host gpu-node-01-decode2 (a copy of gpu-node-01's decode engine, 1 of 1) to group "
    "sglang_decode\n"
    "        gpu-node-01: sglang_advertise_host: 127.0.0.1 -> gpu-node-01 (an address the new hosts reach)\n"
)
# the time risks, without the estimator's venv (tests/unit/conftest.py), at the call length judged
NOT_TIMED = "time: not predicted (make perf-venv)"


def time_risk(tokens: int) -> str:
    return f"    info: time_not_predicted: the time risks were not judged: {NOT_TIMED} [tokens_per_call={tokens}]\n"


RISKS_WITHOUT_TIME = RISKS
RISKS = RISKS_WITHOUT_TIME + time_risk(32768)

PROD = "inventories/production"


# --- load_inventory ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "groups"),
    [
        (
            "production",
            {
                "all": ["gpu-node-01"],
                "sglang_decode": ["gpu-node-01"],
                "sglang_engine": ["gpu-node-01"],
                "sglang_prefill": ["gpu-node-01"],
                "sglang_router": ["gpu-node-01"],
            },
        ),
        (
            "multinode",
            {
                "all": ["decode-01", "decode-02", "decode-03", "prefill-01", "prefill-02", "router-01"],
                "sglang_decode": ["decode-01", "decode-02", "decode-03"],
                "sglang_engine": ["decode-01", "decode-02", "decode-03", "prefill-01", "prefill-02"],
                "sglang_prefill": ["prefill-01", "prefill-02"],
                "sglang_router": ["router-01"],
            },
        ),
    ],
)
def test_load_inventory_groups_and_hostvars(name: str, groups: dict[str, list[str]]) -> None:
    """Groups list their hosts, children included, sorted; every host has its merged group_vars."""
    hostvars, found = cli.load_inventory(str(REPO / "inventories" / name))
    assert found == groups
    assert sorted(hostvars) == groups["all"]
    for hv in hostvars.values():
        assert hv["sglang_gpu_memory_gib"] == 141
        assert hv["sglang_model"]["name"] == "deepseek-v4-flash"
        assert hv["sglang_decode"]["port"] == 30001
    router = hostvars[groups["sglang_router"][0]]["sglang_router"]
    assert router["max_concurrent_requests"] == {"production": 64, "multinode": 192}[name]


def test_load_inventory_of_a_hosts_file() -> None:
    """An inventory file resolves like its directory: the lab's one host in every group, with its group_vars."""
    hostvars, groups = cli.load_inventory(str(REPO / "inventories" / "lab" / "hosts.yml"))
    assert groups == {
        "all": ["lab1"],
        "sglang_decode": ["lab1"],
        "sglang_engine": ["lab1"],
        "sglang_lab_hosts": ["lab1"],
        "sglang_prefill": ["lab1"],
        "sglang_router": ["lab1"],
    }
    assert hostvars["lab1"]["sglang_advertise_host"] == "127.0.0.1"
    assert hostvars["lab1"]["sglang_prefill"]["port"] == 30000


def test_load_inventory_runs_the_venv_ansible_inventory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """ansible-inventory is the one beside the interpreter, found without PATH."""
    monkeypatch.setenv("PATH", str(tmp_path))
    assert cli.load_inventory(str(REPO / "inventories" / "lab" / "hosts.yml"))[1]["sglang_decode"] == ["lab1"]


def test_no_ansible_inventory_is_an_error_naming_the_fix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Neither beside the interpreter nor on PATH: an InventoryError (exit 2) saying where it looked, no traceback."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(cli.sys, "executable", str(tmp_path / "python"))
    with pytest.raises(cli.InventoryError) as err:
        cli.load_inventory(str(REPO / "inventories" / "lab" / "hosts.yml"))
    assert str(err.value) == (
        f"inventory {REPO / 'inventories' / 'lab' / 'hosts.yml'}: ansible-inventory is neither beside "
        f"{tmp_path / 'python'} nor on PATH; fix: install this command with its dependencies (pip install, "
        "docs/install.md), which include ansible-core"
    )


def test_a_missing_inventory_is_an_error_naming_its_path(tmp_path: Path) -> None:
    with pytest.raises(cli.InventoryError) as err:
        cli.load_inventory(str(tmp_path / "prodution"))
    assert str(err.value) == (
        f"inventory {tmp_path / 'prodution'}: no such file or directory ({tmp_path / 'prodution'}); fix: pass an "
        "inventory folder or hosts file, e.g. -i inventories/production"
    )


def test_an_unparsable_inventory_is_an_error_with_the_parser_s_words(tmp_path: Path) -> None:
    """A source no plugin parses fails ansible-inventory (instead of its warning and an implicit localhost)."""
    (tmp_path / "hosts.yml").write_text("all: [\n")
    with pytest.raises(cli.InventoryError) as err:
        cli.load_inventory(str(tmp_path))
    text = str(err.value)
    assert text.startswith(f"inventory {tmp_path}: ansible-inventory cannot parse it: [WARNING]: Failed to parse ")
    assert "YAML parsing failed" in text
    assert f"[ERROR]: Completely failed to parse inventory source {tmp_path / 'hosts.yml'}" in text


def test_an_inventory_without_engine_hosts_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "hosts.yml").write_text("all:\n  children:\n    sglang_router:\n      hosts:\n        r1:\n")
    with pytest.raises(cli.InventoryError) as err:
        cli.load_inventory(str(tmp_path))
    assert str(err.value) == (
        f"inventory {tmp_path}: no host in sglang_prefill or sglang_decode (groups found: all, sglang_router); "
        "fix: declare the engine hosts in those groups"
    )


@pytest.mark.parametrize("command", [["capacity"], ["plan", "--want", "1x1k"], ["monitoring", "--out", "x"]])
def test_a_typo_d_inventory_exits_2_on_every_command(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing that looks like an answer: no report, nothing on stdout, the path on stderr."""
    rc, out, err = run(capsys, command[0], "-i", str(tmp_path / "prodution"), *command[1:])
    assert (rc, out) == (2, "")
    assert err.startswith(f"error: inventory {tmp_path / 'prodution'}: no such file or directory")
    assert not (tmp_path / "x").exists()


# --- model_config_for ----------------------------------------------------------------------------------------------


def test_model_config_for_reads_models_dir() -> None:
    """The model's config.json comes from models/<sglang_model.name>/."""
    config = cli.model_config_for({"sglang_model": {"name": "deepseek-v4-flash"}})
    assert (config["num_parameters_b"], config["quantization"]) == (284, "mxfp4")


@pytest.mark.parametrize(
    ("hostvars", "shown", "path"),
    [
        ({"sglang_model": {"name": "nope"}}, "'nope'", "models/nope/config.json"),
        ({}, "None", "models/None/config.json"),
        ({"sglang_model": None}, "None", "models/None/config.json"),
    ],
    ids=["unknown", "no-model", "null-model"],
)
def test_model_config_for_unknown_model(hostvars: dict[str, Any], shown: str, path: str) -> None:
    """A model without a config.json is an error naming the variable, the missing file and the fix."""
    with pytest.raises(EnvelopeError) as err:
        cli.model_config_for(hostvars)
    assert str(err.value) == f"sglang_model.name={shown}: no {cli.REPO / path}; fix: add the model's config.json there"


# --- engine_capacities / format_table ---------------------------------------------------------------------------------


def test_engine_capacities_of_production() -> None:
    """One entry per engine, prefill first; the live limits carry the bf16 index keys; the router caps at 64."""
    entries = cli.engine_capacities(*shipped_inventory("production"))
    summary = [
        (
            e["host"],
            e["role"],
            e["bf16_index_k"],
            e["router_cap"],
            e["limits"].max_total_num_tokens,
            e["limits"].max_running_requests,
            e["limits"].weights_bytes,
            round(e["bf16_loss"] * 100, 1),
            [r.context_len for r in e["rows"]],
        )
        for e in entries
    ]
    contexts = [4096, 8192, 32768, 65536, 131072, 262144, 524288]
    assert summary == [
        ("gpu-node-01", "prefill", True, 64, 9927680, 256, 37718750000, 8.4, contexts),
        ("gpu-node-01", "decode", True, 64, 11159040, 64, 37718750000, 8.4, contexts),
    ]
    assert cli.format_table(entries[0]) == PREFILL_TABLE
    assert cli.format_table(entries[1]) == DECODE_TABLE


def test_engine_capacities_with_fp8_index_keys_and_no_router_bound() -> None:
    """bf16_index_k off: the live pool is the fp8 one (nothing lost); a router without max_concurrent_requests
    bounds nothing, so max_running_requests binds."""
    inv = with_var(shipped_inventory("production"), "gpu-node-01", "sglang_engine_common", bf16_index_k=False)
    inv[0]["gpu-node-01"]["sglang_router"].pop("max_concurrent_requests")
    entries = cli.engine_capacities(*inv)
    assert [(e["router_cap"], e["bf16_index_k"]) for e in entries] == [(None, False), (None, False)]
    assert cli.format_table(entries[1]) == (
        "## gpu-node-01 decode\n"
        "\n"
        "- per-call context: 524288 tokens (max_req_input_len 524282)\n"
        "- total context (KV pool): 12184320 tokens, page 256\n"
        "- parallel calls (max_running_requests): 64\n"
        "- KV bytes per token per GPU: 7086.8; request-scoped bytes: 0.65 GiB; weights per GPU: 35.1 GiB\n"
        "- bf16 index keys: off; they cost 8.4 % of KV tokens\n"
        "\n"
        "| context | fit in KV pool | run at once | binding limit | fit with fp8 index keys | lost to bf16 keys |\n"
        "|---:|---:|---:|---|---:|---:|\n"
        "| 4096 | 2644 | 64 | max_running_requests | 2644 | 0 |\n"
        "| 8192 | 1399 | 64 | max_running_requests | 1399 | 0 |\n"
        "| 32768 | 366 | 64 | max_running_requests | 366 | 0 |\n"
        "| 65536 | 184 | 64 | max_running_requests | 184 | 0 |\n"
        "| 131072 | 92 | 64 | max_running_requests | 92 | 0 |\n"
        "| 262144 | 46 | 46 | kv_pool | 46 | 0 |\n"
        "| 524288 | 23 | 23 | kv_pool | 23 | 0 |\n"
    )


def test_engine_capacities_router_cap_sums_routers() -> None:
    """Two routers (64 + 32) admit 96 between them; with no router group nothing is capped."""
    hostvars, groups = shipped_inventory("production")
    hostvars["r2"] = copy.deepcopy(hostvars["gpu-node-01"])
    hostvars["r2"]["sglang_router"]["max_concurrent_requests"] = 32
    groups["sglang_router"] = ["gpu-node-01", "r2"]
    assert [e["router_cap"] for e in cli.engine_capacities(hostvars, groups)] == [96, 96]
    assert [
        e["router_cap"]
        for e in cli.engine_capacities(*without_groups(shipped_inventory("production"), "sglang_router"))
    ] == [
        None,
        None,
    ]


def test_engine_capacities_uses_declared_model_size_and_gpu_memory() -> None:
    """sglang_model.params_b/quantization set the weights (142e9 x (1 + 4/128^2) bytes / tp 4), and
    sglang_gpu_memory_gib the memory, of each engine."""
    inv = with_var(shipped_inventory("production"), "gpu-node-01", "sglang_model", params_b=142, quantization="fp8")
    entries = cli.engine_capacities(*inv)
    assert [e["limits"].weights_bytes for e in entries] == [35508666992, 35508666992]
    assert [e["limits"].max_total_num_tokens for e in entries] == [10213120, 11444736]
    hostvars, groups = shipped_inventory("production")
    hostvars["gpu-node-01"]["sglang_gpu_memory_gib"] = 80
    assert [e["limits"].max_total_num_tokens for e in cli.engine_capacities(hostvars, groups)] == [3324928, 4133376]


# --- risk_section ----------------------------------------------------------------------------------------------------


def test_risk_section_of_production() -> None:
    """The declared-value risks of production, indented under their heading."""
    assert cli.risk_section(*shipped_inventory("production")) == RISKS


def test_risk_section_without_engines_is_empty() -> None:
    """An inventory without engine hosts has no risk section."""
    hostvars, _ = shipped_inventory("production")
    assert cli.risk_section(hostvars, {"sglang_router": ["gpu-node-01"]}) == ""


def test_risk_section_none_found() -> None:
    """A fleet whose router admits only what the decode fleet holds (3 x 21 = 63) has no risk."""
    hostvars, groups = shipped_inventory("multinode")
    for hv in hostvars.values():
        hv["sglang_router"]["max_concurrent_requests"] = 63
    assert cli.risk_section(hostvars, groups) == "## Risks (from the declared values)\n\n" + time_risk(32768)


def test_risk_section_of_a_decode_only_fleet() -> None:
    """Without prefill hosts the risks are still judged on the decode engines."""
    text = cli.risk_section(*without_groups(shipped_inventory("multinode"), "sglang_prefill"))
    assert text.startswith(
        "## Risks (from the declared values)\n\n    warn: router_admits_beyond_full_context: the router admits 192"
    )


def test_risk_section_judges_time_at_the_declared_p90_context() -> None:
    """No call length given: the fleet's sglang_workload.p90_context_tokens (4,000 here), not the typical call."""
    hostvars, groups = shipped_inventory("multinode")
    for hv in hostvars.values():
        hv["sglang_router"]["max_concurrent_requests"] = 63
        hv["sglang_workload"] = {"p90_context_tokens": 4000}
    assert cli.risk_section(hostvars, groups) == "## Risks (from the declared values)\n\n" + time_risk(4000)


def test_risk_section_of_a_fleet_without_risk_and_without_time_says_none_found() -> None:
    """A decode-only fleet (no time risks) whose router admits only what the decode fleet holds (3 x 21 = 63)."""
    hostvars, groups = without_groups(shipped_inventory("multinode"), "sglang_prefill")
    for hv in hostvars.values():
        hv["sglang_router"]["max_concurrent_requests"] = 63
    assert cli.risk_section(hostvars, groups) == "## Risks (from the declared values)\n\n    none found\n"


class OfflineEstimator:
    """A step source whose estimator cannot be reached."""

    def prefill(self, queries: Any) -> Any:
        raise RuntimeError("estimator offline")

    def decode(self, queries: Any) -> Any:
        raise RuntimeError("estimator offline")


def test_risk_section_judges_time_on_the_step_source_given() -> None:
    hostvars, groups = shipped_inventory("multinode")
    for hv in hostvars.values():
        hv["sglang_router"]["max_concurrent_requests"] = 63
    text = cli.risk_section(hostvars, groups, 8000, steps=OfflineEstimator())  # type: ignore[arg-type]
    assert text == (
        "## Risks (from the declared values)\n\n    info: time_not_predicted: the time risks were not judged: "
        "time: not predicted (estimator offline) [tokens_per_call=8000]\n"
    )


# --- capacity ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--inventory", "-i"])
def test_capacity_prints_tables_and_writes_report(
    flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], inventories: Any
) -> None:
    """The fleet answer, tables per engine, then the risks, then where the report went; capacity.md and one chart per
    engine."""
    inventories({PROD: shipped_inventory("production")})
    rc, out, err = run(capsys, "capacity", flag, PROD, "--out", str(tmp_path))
    assert (rc, err) == (0, "")
    assert out == f"{FLEET}\n{PREFILL_TABLE}\n{DECODE_TABLE}\n{RISKS}\ntable and charts written to {tmp_path}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "capacity.md",
        "gpu-node-01-decode.svg",
        "gpu-node-01-prefill.svg",
    ]
    assert (tmp_path / "capacity.md").read_text() == (
        f"# Capacity of {PROD}\n\n{FLEET}\n{PREFILL_TABLE}\n![chart](gpu-node-01-prefill.svg)\n\n"
        f"{DECODE_TABLE}\n![chart](gpu-node-01-decode.svg)\n\n{RISKS}"
    )
    for role, running in (("prefill", 256), ("decode", 64)):
        svg = (tmp_path / f"gpu-node-01-{role}.svg").read_text()
        assert f'font-weight="bold">gpu-node-01 {role}: concurrent full-length requests</text>' in svg
        assert f">max_running_requests {running}</text>" in svg
        assert ">router max_concurrent 64</text>" in svg
        assert ">declared context 512Ki</text>" in svg


def test_capacity_default_report_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], inventories: Any
) -> None:
    """Without --out the report goes to reports/capacity-<inventory name>/ of the repository."""
    (tmp_path / "models").symlink_to(REPO / "models")
    monkeypatch.setattr(cli, "REPO", tmp_path)
    inventories({PROD: shipped_inventory("production")})
    rc, out, _ = run(capsys, "capacity", "-i", PROD)
    target = tmp_path / "reports" / "capacity-production"
    assert rc == 0 and out.endswith(f"\ntable and charts written to {target}\n")
    assert sorted(p.name for p in target.iterdir()) == [
        "capacity.md",
        "gpu-node-01-decode.svg",
        "gpu-node-01-prefill.svg",
    ]


def test_capacity_without_risks_and_without_router(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], inventories: Any
) -> None:
    """Multinode with the router at 63 has no risk; its charts are named per host and role. The fleet answer comes
    first: three decode engines of 11,159,040 tokens hold 3 x 21 = 63 calls at the full context, the router's 63."""
    hostvars, groups = shipped_inventory("multinode")
    for hv in hostvars.values():
        hv["sglang_router"]["max_concurrent_requests"] = 63
    inventories({"mn": (hostvars, groups)})
    rc, out, _ = run(capsys, "capacity", "-i", "mn", "--out", str(tmp_path))
    assert rc == 0
    assert out.endswith(
        f"## Risks (from the declared values)\n\n{time_risk(32768)}\ntable and charts written to {tmp_path}\n"
    )
    assert "| 4096 | 2421 | 63 | router | 2644 | 223 |\n" in out
    assert (
        "- parallel calls at the full context of 524288 tokens: 63, bound by router max_concurrent_requests = decode "
        "KV pools at full context\n- router: 63 in flight, then 512 queued for up to 60 s, then 429\n"
        "- per-call context: 524288 tokens; total context (decode KV pools): 33477120 tokens\n"
        "- decode fleet (3 engines): runs 192 requests at once; 63 at the full context of 524288 tokens\n"
    ) in out
    assert [line for line in out.splitlines() if line.startswith("## ")] == [
        "## Fleet",
        "## prefill-01 prefill",
        "## prefill-02 prefill",
        "## decode-01 decode",
        "## decode-02 decode",
        "## decode-03 decode",
        "## Risks (from the declared values)",
    ]
    assert len(list(tmp_path.glob("*.svg"))) == 5
    assert (tmp_path / "capacity.md").read_text().startswith("# Capacity of mn\n\n## Fleet\n\n- parallel calls: 63,")


def test_capacity_error_is_reported_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], inventories: Any
) -> None:
    """A model without a config: exit 2, the error on stderr, no report written."""
    inventories({"bad": with_var(shipped_inventory("production"), "gpu-node-01", "sglang_model", name="nope")})
    rc, out, err = run(capsys, "capacity", "-i", "bad", "--out", str(tmp_path / "out"))
    missing = cli.REPO / "models" / "nope" / "config.json"
    assert (rc, out) == (2, "")
    assert err == f"error: sglang_model.name='nope': no {missing}; fix: add the model's config.json there\n"
    assert not (tmp_path / "out").exists()


# --- plan ----------------------------------------------------------------------------------------------------------

PLAN_200K_HEAD = (
    "want 100 parallel calls x 200,000 tokens (inventories/production)\n"
    "today: 55 at once, bound by decode KV pools (decode: 1 engine(s), 11,159,040 KV tokens, 64 running requests; "
    "router admits 64; per-call context 524,288)\n"
    f"    {NOT_TIMED}\n"
    "does not fit: 55 < 100\n"
    "option 1: add 1 decode host (as asked)\n"
)
PLAN_4K = (
    "want 10 parallel calls x 4,000 tokens (inventories/production)\n"
    "today: 64 at once, bound by decode max_running_requests (decode: 1 engine(s), 11,159,040 KV tokens, 64 running "
    "requests; router admits 64; per-call context 524,288)\n"
    f"    {NOT_TIMED}\n"
    "fits: 64 >= 10; nothing to change\n"
)


@pytest.mark.parametrize("flag", ["--inventory", "-i"])
def test_plan_prints_each_shape_then_the_risks(flag: str, capsys: pytest.CaptureFixture[str], inventories: Any) -> None:
    """The README's example: 55 of 100 calls at 200k fit today; each --want is planned in order, risks last. One shape
    that does not fit today makes the exit code 1 (answered, does not fit)."""
    inventories({PROD: shipped_inventory("production")})
    rc, out, err = run(capsys, "plan", flag, PROD, "--want", "100x200k", "--want", "10x4k")
    assert (rc, err) == (1, "")
    assert out.startswith(PLAN_200K_HEAD)
    assert out.endswith(f"\n\n{PLAN_4K}\n{RISKS_WITHOUT_TIME}{time_risk(4000)}\n")


def test_plan_of_a_decode_only_fleet(capsys: pytest.CaptureFixture[str], inventories: Any) -> None:
    """Without prefill hosts the plan reads the model from the first decode host."""
    inventories({"mn": without_groups(shipped_inventory("multinode"), "sglang_prefill")})
    rc, out, _ = run(capsys, "plan", "-i", "mn", "--want", "10x4k")
    assert rc == 0
    assert out.startswith(
        "want 10 parallel calls x 4,000 tokens (mn)\n"
        "today: 192 at once, bound by decode max_running_requests (decode: 3 engine(s), 33,477,120 KV tokens, 192 "
        "running requests; router admits 192; per-call context 524,288)\n"
        "fits: 192 >= 10; nothing to change\n\n## Risks (from the declared values)\n"
    )


@pytest.mark.parametrize(
    ("inventory", "wants", "message"),
    [
        ("prod", ["abc", "0x4k"], "--want 'abc': expected CALLSxTOKENS, e.g. 100x200k (100 calls of 200,000 tokens)"),
        (
            "prod",
            ["10x4q"],
            "--want '10x4q': Invalid integer value: '4q'. Use a plain integer, SI suffixes (1k, 1M), or IEC "
            "suffixes (1Ki, 1Mi). Suffixes are case-sensitive.",
        ),
        ("prod", ["0x4k"], "--want '0x4k': calls and tokens must be > 0"),
        ("routers-only", ["10x4k"], "routers-only declares no engine host; fix: add hosts to sglang_decode"),
        ("no-decode", ["10x4k"], "the inventory has no host in group sglang_decode; fix: declare the decode engines"),
        ("bad-model", ["10x4k"], f"sglang_model.name='nope': no {cli.REPO / 'models/nope/config.json'}; fix: "),
    ],
)
def test_plan_errors(
    inventory: str, wants: list[str], message: str, capsys: pytest.CaptureFixture[str], inventories: Any
) -> None:
    """Bad shapes and fleets the planner cannot read exit 2 with the reason on stderr."""
    prod = shipped_inventory("production")
    inventories(
        {
            "prod": prod,
            "routers-only": (prod[0], {"sglang_router": ["gpu-node-01"]}),
            "no-decode": without_groups(prod, "sglang_decode"),
            "bad-model": with_var(prod, "gpu-node-01", "sglang_model", name="nope"),
        }
    )
    argv = [arg for want in wants for arg in ("--want", want)]
    rc, out, err = run(capsys, "plan", "-i", inventory, *argv)
    assert (rc, out) == (2, "")
    assert err.startswith(f"error: {message}") and err.endswith("\n")


# --- check-request -------------------------------------------------------------------------------------------------

QUEUE = (
    "wait in the router's queue (up to queue_timeout_secs=60, then 'timed out waiting for an admission slot'); "
    "beyond that smg answers 429 'admission queue is at capacity'\n"
    f"  {NOT_TIMED}\n"  # an admitted request's predicted times, without the estimator's venv
)


@pytest.mark.parametrize(
    ("inventory", "argv", "rc", "out"),
    [
        (
            "production",
            ["--input-tokens", "400000", "--max-new-tokens", "8000"],
            0,
            f"400000 input + 8000 new tokens: admitted: 27 like it run at once; the next 256 {QUEUE}",
        ),
        (
            "production",
            ["--input-tokens", "400000", "--max-new-tokens", "8000", "--chat"],
            0,
            f"400000 input + 8000 new tokens (chat): admitted: 27 like it run at once; the next 256 {QUEUE}",
        ),
        (
            "multinode",
            ["--input-tokens", "1000", "--max-new-tokens", "10"],
            0,
            f"1000 input + 10 new tokens: admitted: 192 like it run at once; the next 512 {QUEUE}",
        ),
        (
            "production",
            ["--input-tokens", "600000", "--max-new-tokens", "10"],
            1,
            "600000 input + 10 new tokens: refused by context_length (HTTP 400): The input (600000 tokens) is "
            "longer than the model's context length (524288 tokens).\n",
        ),
        (
            "production",
            ["--input-tokens", "524270", "--max-new-tokens", "10", "--chat"],
            1,
            "524270 input + 10 new tokens (chat): refused by context_length (HTTP 400): Requested token count "
            "exceeds the model's maximum context length of 524288 tokens. You requested a total of 524296 tokens: "
            "524286 tokens from the input messages and 10 tokens for the completion. Please reduce the number of "
            "tokens in the input messages or the completion to fit within the limit.\n",
        ),
        (
            "production",
            ["--input-tokens", "524283", "--max-new-tokens", "1"],
            1,
            "524283 input + 1 new tokens: refused by max_req_input_len (HTTP 400): Input length (524283 tokens) "
            "exceeds the maximum allowed length (524282 tokens). Use a shorter input or enable "
            "--allow-auto-truncate.\n",
        ),
        (
            "production",
            ["--input-tokens", "1000", "--max-new-tokens", "523288"],
            0,
            "1000 input + 523288 new tokens: refused by kv_pool (HTTP 200): no error: the scheduler caps "
            "max_new_tokens at 523286 (max_req_len 524287 = min(context_len - 1, KV pool 11159040 - 1)), so the "
            "answer stops early\n",
        ),
    ],
    ids=["admitted", "chat", "three-decode-engines", "input-too-long", "total-too-long", "input-len", "kv-capped"],
)
def test_check_request(
    inventory: str, argv: list[str], rc: int, out: str, capsys: pytest.CaptureFixture[str], inventories: Any
) -> None:
    """The verdict line, and exit 1 only when the server answers an HTTP error."""
    inventories({inventory: shipped_inventory(inventory)})
    assert run(capsys, "check-request", "--inventory", inventory, *argv) == (rc, out, "")


def test_check_request_payload_limit(capsys: pytest.CaptureFixture[str], inventories: Any) -> None:
    """A router max_payload_size below the body size: smg's 413, exit 1."""
    inventories(
        {"small": with_var(shipped_inventory("production"), "gpu-node-01", "sglang_router", max_payload_size=1000)}
    )
    rc, out, _ = run(capsys, "check-request", "-i", "small", "--input-tokens", "1000", "--max-new-tokens", "10")
    assert rc == 1
    assert out == (
        "1000 input + 10 new tokens: refused by max_payload_size (HTTP 413): Request body exceeded the payload "
        "limit (max_payload_size) (a body of up to 81536 bytes against max_payload_size=1000)\n"
    )


def test_check_request_without_router(capsys: pytest.CaptureFixture[str], inventories: Any) -> None:
    """No router host: no router bound, and smg's default queue of 100."""
    inventories({"norouter": without_groups(shipped_inventory("production"), "sglang_router")})
    rc, out, _ = run(capsys, "check-request", "-i", "norouter", "--input-tokens", "1000", "--max-new-tokens", "10")
    assert (rc, out) == (0, f"1000 input + 10 new tokens: admitted: 64 like it run at once; the next 100 {QUEUE}")


@pytest.mark.parametrize(
    ("inventory", "err"),
    [
        ("no-decode", "error: inventory no-decode: no host in sglang_decode; fix: declare the decode engines\n"),
        (
            "bad-model",
            f"error: sglang_model.name='nope': no {cli.REPO / 'models/nope/config.json'}; fix: add the model's "
            "config.json there\n",
        ),
    ],
)
def test_check_request_errors(inventory: str, err: str, capsys: pytest.CaptureFixture[str], inventories: Any) -> None:
    """A fleet without decode engines, or with an unknown model: exit 2, the reason on stderr."""
    prod = shipped_inventory("production")
    inventories(
        {
            "no-decode": without_groups(prod, "sglang_decode"),
            "bad-model": with_var(prod, "gpu-node-01", "sglang_model", name="nope"),
        }
    )
    argv = ["check-request", "-i", inventory, "--input-tokens", "1000", "--max-new-tokens", "10"]
    assert run(capsys, *argv) == (2, "", err)


# --- monitoring ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--inventory", "-i"])
def test_monitoring_writes_rules_tests_and_dashboard(
    flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], inventories: Any
) -> None:
    """Three files in a new directory, each path printed; YAML in rule order without wrapping, indented JSON."""
    inventories({"inventories/lab": shipped_inventory("lab")})
    target = tmp_path / "a" / "b"
    rc, out, err = run(capsys, "monitoring", flag, "inventories/lab", "--out", str(target))
    assert (rc, err) == (0, "")
    names = ["sglang_rules.yml", "sglang_rules_test.yml", "sglang_dashboard.json"]
    assert out == "".join(f"{target / name}\n" for name in names)
    assert sorted(p.name for p in target.iterdir()) == sorted(names)
    rules = (target / "sglang_rules.yml").read_text()
    assert rules.startswith(
        "groups:\n- name: sglang-lab1-prefill\n  rules:\n  - alert: SGLangKVPoolNearFull\n"
        '    expr: sum by (server) (sglang:num_used_tokens{job="sglang_engine",server="lab1:prefill"}) / sum by '
        '(server) (sglang:max_total_num_tokens{job="sglang_engine",server="lab1:prefill"}) > 0.9\n'
        "    for: 15s\n"
    )
    assert "summary: 'lab1:prefill: KV pool 90 % full'\n" in rules
    # docs/capacity.md's predicted prefill pool; 0.9 x 256 running requests (prefill) and 0.9 x 64 (decode), rounded up
    assert (
        "the capacity model predicts a pool of 9,927,680 tokens for sglang_prefill (mem_fraction_static 0.78" in rules
    )
    assert 'server="lab1:prefill"}) >= 231\n' in rules
    assert 'server="lab1:decode"}) >= 58\n' in rules
    tests = (target / "sglang_rules_test.yml").read_text()
    assert tests.startswith(
        "rule_files:\n- sglang_rules.yml\nevaluation_interval: 1m\ntests:\n"
        "- name: SGLangKVPoolNearFull lab1:prefill fires\n  interval: 1m\n"
    )
    dashboard = (target / "sglang_dashboard.json").read_text()
    assert dashboard.startswith('{\n "schemaVersion": 41,\n "templating": {},\n')
    assert dashboard.endswith("\n}\n")
    assert json.loads(dashboard)["uid"] == "sglang-dsv4-envelope"


def test_monitoring_into_an_existing_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], inventories: Any
) -> None:
    """--out may exist already; the policy comes from the first engine host's sglang_monitoring_* variables."""
    inv = shipped_inventory("multinode")
    inv[0]["prefill-01"]["sglang_monitoring_kv_usage_warning"] = 0.8
    inventories({"mn": inv})
    rc, out, _ = run(capsys, "monitoring", "-i", "mn", "--out", str(tmp_path))
    names = ["sglang_rules.yml", "sglang_rules_test.yml", "sglang_dashboard.json"]
    assert (rc, out.splitlines()) == (0, [str(tmp_path / name) for name in names])
    rules = (tmp_path / "sglang_rules.yml").read_text()
    assert "summary: 'prefill-02:prefill: KV pool 80 % full'\n" in rules
    assert "summary: 'decode-03:decode: KV pool 80 % full'\n" in rules
    assert "KV pool 90 % full" not in rules


@pytest.mark.parametrize(
    ("inventory", "err"),
    [
        (
            "routers-only",
            "error: monitoring: the inventory has no host in sglang_prefill or sglang_decode: nothing to monitor",
        ),
        (
            "bad-policy",
            "error: monitoring: sglang_monitoring_kv_usage_warning=2: must be a fraction of the limit in (0, 1]; "
            "fix: e.g. 0.9",
        ),
    ],
)
def test_monitoring_errors(
    inventory: str, err: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], inventories: Any
) -> None:
    """No engine host, or a bad policy on the first engine host: exit 2, nothing written."""
    hostvars, groups = shipped_inventory("multinode")
    bad = copy.deepcopy(hostvars)
    bad["prefill-01"]["sglang_monitoring_kv_usage_warning"] = 2
    inventories({"routers-only": (hostvars, {"sglang_router": ["router-01"]}), "bad-policy": (bad, groups)})
    assert run(capsys, "monitoring", "-i", inventory, "--out", str(tmp_path / "m")) == (2, "", err + "\n")
    assert not (tmp_path / "m").exists()


def test_monitoring_files_names_and_first_host_policy() -> None:
    """monitoring_files: {rules, tests, dashboard}; a later host's policy does not apply."""
    hostvars, groups = shipped_inventory("lab")
    hostvars["lab1"]["sglang_monitoring_running_warning"] = 0.5
    files = cli.monitoring_files(hostvars, groups)
    assert list(files) == ["sglang_rules.yml", "sglang_rules_test.yml", "sglang_dashboard.json"]
    assert 'server="lab1:decode"}) >= 32\n' in files["sglang_rules.yml"]


# --- the argument parser -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "lines"),
    [
        (
            [],
            [
                "usage: sglang-envelope [-h] [--version] [--no-time] [--json] "
                "{capacity,plan,monitoring,check-request,bench,calibrate} ...",
                "  --no-time             memory only: leave out the time model (TTFT/ITL predictions)",
                "    capacity            capacity table and chart of every engine host of an inventory",
                "    plan                does a workload shape fit the inventory, and what makes it fit",
                "    monitoring          Prometheus alert rules and their promtool tests from the envelope",
                "    check-request       which limit would reject a request of this shape, with its text",
                "    bench               benchmark the deployed fleet with SGLang's bench_serving, measured beside "
                "predicted",
                "    calibrate           the fleet's measured points and the time model's calibration to them",
            ],
        ),
        (
            ["capacity"],
            [
                "usage: sglang-envelope capacity [-h] --inventory INVENTORY [--no-time] [--json] [--out OUT]",
                "  --out OUT             directory for capacity.md and the SVG charts "
                "(default reports/capacity-<name>/)",
            ],
        ),
        (
            ["plan"],
            [
                "usage: sglang-envelope plan [-h] --inventory INVENTORY [--no-time] [--json] --want CALLSxTOKENS "
                "[--ttft-p90 DURATION] [--itl-p90 DURATION] [--tokens-per-s N] [--output-tokens N]",
                "                            [--from-live [REPORT]] [--rate CALLS_PER_S]",
                "  --want CALLSxTOKENS   e.g. 100x200k; repeat for more",
                "  --from-live [REPORT]  time from the live fleet: the step times the audit measured (an audit report "
                "folder or its audit.json; default the newest reports/audit-*/ of this inventory's engines)",
                "                        instead of AIConfigurator's",
            ],
        ),
        (
            ["monitoring"],
            [
                "usage: sglang-envelope monitoring [-h] --inventory INVENTORY [--no-time] [--json] --out OUT",
                "  --out OUT             directory for the rules, their promtool tests and the dashboard",
            ],
        ),
        (
            ["check-request"],
            [
                "usage: sglang-envelope check-request [-h] --inventory INVENTORY [--no-time] [--json] --input-tokens N "
                "--max-new-tokens N [--chat]",
                "  --input-tokens N      prompt tokens (e.g. 600k, 512Ki)",
                "  --max-new-tokens N    the request's max_new_tokens (e.g. 8k)",
                "  --chat                a chat request (the template adds tokens)",
            ],
        ),
        (
            ["bench"],
            [
                "usage: sglang-envelope bench [-h] --inventory INVENTORY [--no-time] [--json] [--want CALLSxTOKENS] "
                "[--output-tokens N] [--concurrency C,C,...] [--prompts N] [--tokenizer PATH] [--url URL]",
                "                             [--out OUT] [--production-load-ok]",
                "  --want CALLSxTOKENS   shape, as plan --want (e.g. 64x32k); repeatable",
                "  --production-load-ok  allow a router that is not a lab host: it gets full load",
            ],
        ),
    ],
    ids=["top", "capacity", "plan", "monitoring", "check-request", "bench"],
)
def test_help(
    argv: list[str], lines: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each subcommand's usage, options and help texts."""
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit) as exit_:
        cli.main([*argv, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out.splitlines()
    assert [line for line in lines if line not in out] == []
    assert any(line.startswith("  --inventory INVENTORY") or line.startswith("  -i") for line in out) == bool(argv)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "sglang-envelope: error: the following arguments are required: command"),
        (
            ["capacity"],
            "sglang-envelope capacity: error: the following arguments are required: --inventory/-i",
        ),
        (["plan", "-i", "x"], "sglang-envelope plan: error: the following arguments are required: --want"),
        (
            ["monitoring", "-i", "x"],
            "sglang-envelope monitoring: error: the following arguments are required: --out",
        ),
        (
            ["check-request", "-i", "x", "--max-new-tokens", "1"],
            "sglang-envelope check-request: error: the following arguments are required: --input-tokens",
        ),
        (
            ["check-request", "-i", "x", "--input-tokens", "1"],
            "sglang-envelope check-request: error: the following arguments are required: --max-new-tokens",
        ),
        (
            ["check-request", "-i", "x", "--input-tokens", "1.5", "--max-new-tokens", "1"],
            "sglang-envelope check-request: error: argument --input-tokens: Invalid integer value: '1.5'. Use a plain "
            "integer, SI suffixes (1k, 1M), or IEC suffixes (1Ki, 1Mi). Suffixes are case-sensitive.",
        ),
        (
            ["check-request", "-i", "x", "--input-tokens", "1", "--max-new-tokens", "x"],
            "sglang-envelope check-request: error: argument --max-new-tokens: Invalid integer value: 'x'. Use a plain "
            "integer, SI suffixes (1k, 1M), or IEC suffixes (1Ki, 1Mi). Suffixes are case-sensitive.",
        ),
        (["size"], "sglang-envelope: error: argument command: invalid choice: 'size'"),
    ],
    ids=["none", "capacity", "plan", "monitoring", "input", "max-new", "input-int", "max-new-int", "unknown"],
)
def test_argument_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Missing or malformed arguments: usage on stderr and exit 2, before any inventory is read."""
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_format_table_states_an_engine_of_two_ranks_whole() -> None:
    """The capacity model's limits are one rank's; an engine of two attention-DP ranks holds twice the pool and runs
    twice the slots (2 x 11,159,040 tokens, 2 x 64 calls)."""
    decode = next(e for e in cli.engine_capacities(*shipped_inventory("production")) if e["role"] == "decode")
    text = cli.format_table({**decode, "ranks": 2})
    assert "- total context (KV pool): 22318080 tokens (2 attention-DP ranks of 11159040), page 256\n" in text
    assert "- parallel calls (max_running_requests): 128\n" in text
    assert "- total context (KV pool): 11159040 tokens, page 256\n" in cli.format_table(decode)
