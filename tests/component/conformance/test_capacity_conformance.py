"""The capacity model against SGLang 0.5.23's own pool sizing, executed on CPU over the whole grid.

Every cell (model x PD mode x max_running_requests x context x tp x index-key dtype) is sized at five
mem_fraction_static values by plugins/module_utils/sglang_capacity.py and by SGLang's KVCacheConfigurator and pool
configurator (tests/component/conformance/sglang_pool.py); the same available bytes go to both.
"""

from __future__ import annotations

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_engine_rules import FP4_INDEXER_REFUSAL
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_validate import check_engine
from pool_grid import FRACTIONS, PARSER_PYTHON, Cell, budget, compare, grid, model_config, ours, sglang


@pytest.fixture(scope="module")
def table() -> list[tuple[Cell, float, int, dict]]:
    if not PARSER_PYTHON.exists():
        pytest.fail(f"{PARSER_PYTHON} is missing; fix: run `make parser-venv` (make test does it)")
    cells = grid()
    budgets = [[budget(cell, fraction) for fraction in FRACTIONS] for cell in cells]
    results = sglang(cells, budgets)
    return [
        (cell, fraction, available, theirs)
        for cell, cell_budgets, cell_results in zip(cells, budgets, results, strict=True)
        for fraction, available, theirs in zip(FRACTIONS, cell_budgets, cell_results, strict=True)
    ]


def test_grid_covers_the_envelopes_that_matter(table: list[tuple[Cell, float, int, dict]]) -> None:
    cells = {row[0] for row in table}
    assert {c.mode for c in cells} == {"prefill", "decode", "null"}
    assert {c.max_running_requests for c in cells} == {None, 16, 64, 256}
    assert {c.tp_size for c in cells} == {2, 4, 8} and {c.bf16_index_k for c in cells} == {False, True}
    assert {c.model for c in cells} == {"deepseek-v4-flash", "deepseek-v3.2"}
    assert len(table) >= 500


def test_model_agrees_with_sglang_in_every_cell(table: list[tuple[Cell, float, int, dict]]) -> None:
    failures = []
    for cell, fraction, available, theirs in table:
        problems = compare(ours(cell, available), theirs)
        if problems:
            failures.append(f"{cell.name()} mfs={fraction} ({available:,} B): " + "; ".join(problems))
    assert not failures, f"{len(failures)} of {len(table)} cells disagree:\n" + "\n".join(failures[:40])


def test_sglang_sizes_deepseek_v4_in_ratio_mode(table: list[tuple[Cell, float, int, dict]]) -> None:
    """The V4 override sets swa_full_tokens_ratio before the hook checks it: SWA is a share of the pool."""
    for cell, _, _, theirs in table:
        if cell.model == "deepseek-v4-flash":
            assert theirs["swa_cap_tokens"] is None and theirs["swa_ratio"] == 0.1, cell.name()
            assert theirs["indexer_bytes_per_token"] == (256 if cell.bf16_index_k else 132), cell.name()


def test_a_wrong_model_is_caught(table: list[tuple[Cell, float, int, dict]]) -> None:
    """The comparison fails on a pool 1 % off, on a running-request count one off, and on an SGLang refusal."""
    cell, _, available, theirs = table[0]
    row = ours(cell, available)
    assert not compare(row, theirs)
    assert compare({**row, "max_total_num_tokens": int(row["max_total_num_tokens"] * 1.01)}, theirs)
    assert compare({**row, "max_running_requests": row["max_running_requests"] + 1}, theirs)
    assert compare(row, {"error": "RuntimeError: Not enough memory"})


def test_fp4_indexer_is_refused_on_h200_by_sglang_and_by_validation() -> None:
    """SGLang's serving hook refuses --enable-deepseek-v4-fp4-indexer on SM90; validation says the same."""
    cell = Cell("deepseek-v4-flash", "decode", 64, 524288, 4, False, extra_argv=("--enable-deepseek-v4-fp4-indexer",))
    [[theirs]] = sglang([cell], [[100 * 2**30]])
    assert "error" in theirs and FP4_INDEXER_REFUSAL in theirs["error"], theirs
    envelope = {**cell.envelope(), "enable_deepseek_v4_fp4_indexer": True, "gpu_ids": [4, 5, 6, 7], "port": 30001}
    hostvars = {"sglang_gpu_memory_gib": 141, "sglang_model": {"params_b": 284, "quantization": "mxfp4"}}
    problems, _ = check_engine("h", "decode", envelope, hostvars, model_config(cell.model))
    assert any(FP4_INDEXER_REFUSAL in p and "enable_deepseek_v4_fp4_indexer" in p for p in problems), problems
