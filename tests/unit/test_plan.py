"""The planner on the production inventory: every option it offers passes validation and serves the shape."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_plan import (
    RECALL_COST,
    Fleet,
    PlanError,
    Shape,
    fleet_fit,
    parse_shape,
    plan,
    render_plan,
    rollout_plan,
    rollout_shortfalls,
)
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_validate import check_fleet
from sglang_envelope_cli.commands import model_config_for
from shipped import shipped_inventory

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def production() -> tuple[Fleet, dict]:
    hostvars, groups = shipped_inventory("production")
    fleet = Fleet({h: dict(v) for h, v in hostvars.items()}, groups)
    return fleet, model_config_for(hostvars[fleet.hosts("decode")[0]])


def test_shapes_parse_as_sglang_reads_ints() -> None:
    assert parse_shape("100x200k") == Shape(100, 200_000)
    assert parse_shape("8X128Ki") == Shape(8, 131_072)
    for bad in ("100", "x200k", "100x200K", "0x10", "5x-3"):
        with pytest.raises(PlanError, match="--want"):
            parse_shape(bad)


def test_100_calls_at_200k_do_not_fit_production_today(production: tuple[Fleet, dict]) -> None:
    fleet, config = production
    result = plan(fleet, config, Shape(100, 200_000))
    assert not result.fits_today
    # 11,159,040 KV tokens on the one decode engine hold 55 calls of 200,192 (page-rounded) tokens.
    assert (result.today.parallel, result.today.binding) == (55, "decode KV pools")


def test_every_option_validates_and_serves_the_shape(production: tuple[Fleet, dict]) -> None:
    fleet, config = production
    shape = Shape(100, 200_000)
    result = plan(fleet, config, shape)
    # Only another decode host serves 100 calls of 200k (2 x 55); the other levers serve shorter calls.
    assert len(result.options) >= 1 and len(result.shorter) >= 3, result.refused
    for option in result.options:
        assert option.fleet is not None and option.after is not None
        assert check_fleet(option.fleet.hostvars, option.fleet.groups, config) == [], option.title
        served = fleet_fit(option.fleet, config, option.tokens(shape))
        assert served.parallel >= shape.calls, (option.title, served)
        assert option.diff_lines(), option.title
    first = result.options[0]
    assert first.exact and len(first.added_hosts) == 1, first.title  # one more decode host: 2 x 55 >= 100
    assert ("sglang_router.max_concurrent_requests", 64, 100) in first.changes
    assert all(o.exact for o in result.options)  # an answer serves the shape as asked
    # Lower context_length options serve shorter calls: listed apart, each at context_length - 2 tokens a call.
    lowered = result.shorter
    assert lowered and all(not o.exact and o.tokens(shape) < shape.tokens for o in lowered)
    fp8 = [o for o in lowered if any(v.endswith("bf16_index_k") for v, _, _ in o.changes)]
    assert fp8 and all(RECALL_COST in o.caveats for o in fp8)
    for option in lowered:
        assert option.after is not None
        context = next(after for var, _, after in option.changes if var.endswith(".context_length"))
        assert option.tokens(shape) == context - 2, option.title


def test_running_requests_bind_before_the_pool_at_short_context(production: tuple[Fleet, dict]) -> None:
    fleet, config = production
    result = plan(fleet, config, Shape(100, 16_000))
    assert result.today.binding == "decode max_running_requests" and result.today.parallel == 64
    first = result.options[0]
    assert first.exact and not first.added_hosts and not first.caveats
    assert {v for v, _, _ in first.changes} == {
        "sglang_decode.max_running_requests",
        "sglang_router.max_concurrent_requests",
    }


def test_a_shape_that_fits_needs_no_option(production: tuple[Fleet, dict]) -> None:
    fleet, config = production
    result = plan(fleet, config, Shape(40, 128_000))
    assert result.fits_today and result.options == []


def test_plan_command_prints_the_options() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "sglang_envelope_cli", "--no-time", "plan", "-i", "inventories/production", "--want",
         "100x200k"],
        cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert run.returncode == 1, run.stderr  # answered: 100 calls of 200k do not fit today
    assert "today: 55 at once, bound by decode KV pools" in run.stdout
    assert "option 1: add 1 decode host (as asked)" in run.stdout
    assert "time: not predicted (make perf-venv)" in run.stdout  # --no-time: the memory answer alone
    bad = subprocess.run(
        [sys.executable, "-m", "sglang_envelope_cli", "plan", "-i", "inventories/production", "--want", "lots"],
        cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert bad.returncode == 2 and "--want 'lots'" in bad.stderr


def test_an_option_is_dropped_only_when_another_is_no_worse_on_every_lever() -> None:
    from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_plan import Option, _undominated

    def option(hosts: int, recall: bool, exact: bool = True) -> Option:
        return Option(f"{hosts} hosts, recall cost {recall}", exact=exact, rank=(not exact, hosts, recall, 0, 0))

    cheap_fp8, one_host, two_hosts, lowered = (
        option(0, True),
        option(1, False),
        option(2, False),
        option(0, False, False),
    )
    kept = _undominated([cheap_fp8, one_host, two_hosts, lowered])
    # fp8 with no host does not replace a host without the recall cost; two hosts are worse than one on every lever.
    assert kept == [cheap_fp8, one_host, lowered]


def test_rollout_plan_counts_what_is_left_while_each_server_is_out() -> None:
    hostvars, groups = shipped_inventory("multinode")
    fleet = Fleet({h: dict(v) for h, v in hostvars.items()}, groups)
    config = model_config_for(hostvars[fleet.hosts("decode")[0]])
    whole, steps = rollout_plan(fleet, config, 8192)
    assert [(s.role, s.host) for s in steps] == [
        *(("prefill", h) for h in fleet.hosts("prefill")),
        *(("decode", h) for h in fleet.hosts("decode")),
    ]
    decode_out = [s for s in steps if s.role == "decode"]
    # Every decode engine runs max_running_requests 64 at 8k tokens; the router admits all of them.
    today = fleet_fit(fleet, config, 8192)
    assert whole == today.parallel == min(sum(today.per_engine), today.router_cap or whole)
    for step in decode_out:
        assert step.parallel_left == sum(today.per_engine) - today.per_engine[0], step
        assert step.binding_left == "decode max_running_requests", step
    lines = render_plan(whole, steps, 8192)
    assert lines[0].startswith(f"rollout plan (one server at a time): the fleet carries {whole} parallel calls")
    assert len(lines) == 1 + len(steps)
    least = min(s.parallel_left for s in steps)
    assert rollout_shortfalls(steps, least, 8192) == []
    short = rollout_shortfalls(steps, least + 1, 8192)
    assert len(short) == sum(s.parallel_left == least for s in steps) > 0, short
    assert f"below sglang_validate_rollout_min_parallel={least + 1}" in short[0]
    assert f"below the declared load of {least + 1}" in "\n".join(render_plan(whole, steps, 8192, least + 1))


def test_rollout_plan_of_one_host_names_the_outage(production: tuple[Fleet, dict]) -> None:
    fleet, config = production
    whole, steps = rollout_plan(fleet, config, 8192)
    assert whole > 0
    assert [(s.role, s.parallel_left) for s in steps] == [("prefill", 0), ("decode", 0)]
    text = "\n".join(render_plan(whole, steps, 8192))
    assert "decode on gpu-node-01: outage: no decode engine left" in text
    assert "503 + Retry-After" in text


def test_another_decode_host_opens_a_loopback_lab_to_the_network() -> None:
    """The lab listens on and advertises 127.0.0.1 (one host serves everything): a host added to it must be reached
    from elsewhere, so the option also binds the engines to every address and advertises the host's name, and only
    then passes the validation's listen/advertise rules."""
    hostvars, groups = shipped_inventory("lab")
    hostvars = {h: dict(v) for h, v in hostvars.items()}
    host = next(iter(hostvars))
    common = dict(hostvars[host]["sglang_engine_common"], host="127.0.0.1")  # as Ansible renders the lab's template
    hostvars[host]["sglang_engine_common"] = common
    fleet = Fleet(hostvars, groups)
    config = model_config_for(hostvars[host])
    result = plan(fleet, config, Shape(2 * fleet_fit(fleet, config, 200_000).parallel, 200_000))
    first = result.options[0]
    assert first.added_hosts and first.refused == [], first.refused
    assert ("sglang_engine_common.host", "127.0.0.1", "0.0.0.0") in first.changes, first.changes
    assert (f"{host}: sglang_advertise_host", "127.0.0.1", f"{host} (an address the new hosts reach)") in first.changes
    assert first.fleet is not None and check_fleet(first.fleet.hostvars, first.fleet.groups, config) == []
