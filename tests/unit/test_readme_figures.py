"""The production capacity figures of docs/capacity.md and of the README's quick start are what the capacity command
computes for inventories/production."""

from __future__ import annotations

import re
from pathlib import Path

from sglang_envelope_cli.commands import engine_capacities, fleet_section
from shipped import shipped_inventory

REPO = Path(__file__).resolve().parents[2]


def test_capacity_doc_production_table_matches_the_capacity_command() -> None:
    text = (REPO / "docs" / "capacity.md").read_text()
    rows = {
        m.group(1): (int(m.group(2).replace(",", "")), int(m.group(3)), int(m.group(4)), float(m.group(5)))
        for m in re.finditer(
            r"^\| (decode|prefill) \(`mem_fraction_static` [\d.]+\) \| ([\d,]+) tokens \| (\d+) \| (\d+) \| "
            r"([\d.]+) % of KV tokens \|$",
            text,
            re.MULTILINE,
        )
    }
    assert set(rows) == {"decode", "prefill"}, "docs/capacity.md's production capacity table is missing or reshaped"
    hostvars, groups = shipped_inventory("production")
    for entry in engine_capacities(hostvars, groups):
        limits = entry["limits"]
        full = next(r for r in entry["rows"] if r.context_len == limits.context_len)
        computed = (limits.max_total_num_tokens, limits.max_running_requests, full.fit_in_pool)
        assert rows[entry["role"]][:3] == computed, (entry["role"], computed)
        assert rows[entry["role"]][3] == round(entry["bf16_loss"] * 100, 1)


def test_readme_quick_start_decode_figures_match_the_capacity_command() -> None:
    text = " ".join((REPO / "README.md").read_text().split())
    match = re.search(
        r"Production's decode engine: a KV pool of ([\d,]+) tokens, (\d+) running requests, (\d+) calls at the full "
        r"([\d,]+)-token context",
        text,
    )
    assert match, "the README's quick start no longer states the decode engine's figures"
    hostvars, groups = shipped_inventory("production")
    decode = next(e for e in engine_capacities(hostvars, groups) if e["role"] == "decode")
    limits = decode["limits"]
    full = next(r for r in decode["rows"] if r.context_len == limits.context_len)
    stated = tuple(int(g.replace(",", "")) for g in match.groups())
    assert stated == (limits.max_total_num_tokens, limits.max_running_requests, full.fit_in_pool, limits.context_len)


def test_readme_quick_start_fleet_figures_match_the_capacity_command() -> None:
    text = " ".join((REPO / "README.md").read_text().split())
    match = re.search(r"the fleet: (\d+) parallel calls, (\d+) at the full context", text)
    assert match, "the README's quick start no longer states the fleet's answer"
    hostvars, groups = shipped_inventory("production")
    printed = fleet_section(engine_capacities(hostvars, groups), hostvars, groups)
    assert f"- parallel calls: {match[1]}, bound by" in printed, printed
    assert f"tokens: {match[2]}, bound by" in printed.split("- parallel calls at the full context of", 1)[1], printed
