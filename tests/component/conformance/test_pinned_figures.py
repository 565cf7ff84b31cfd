"""The figures tests/unit/test_capacity.py pins as SGLang's are what SGLang 0.5.23's configurators give."""

from __future__ import annotations

import importlib.util
from types import ModuleType

import pytest
from pool_grid import PARSER_PYTHON, REPO, Cell, budget, sglang

GIB = 1 << 30


def _capacity_tests() -> ModuleType:
    spec = importlib.util.spec_from_file_location("unit_test_capacity", REPO / "tests" / "unit" / "test_capacity.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module", autouse=True)
def parser_venv() -> None:
    if not PARSER_PYTHON.exists():
        pytest.fail(f"{PARSER_PYTHON} is missing; fix: run `make parser-venv` (make test does it)")


def test_v32_40_gib_pool() -> None:
    cell = Cell("deepseek-v3.2", "null", None, 131072, 8, False)
    (theirs,) = sglang([cell], [[40 * GIB]])[0]
    assert theirs["max_total_num_tokens"] == 893_504


def test_production_pools() -> None:
    pinned = _capacity_tests().SGLANG_PRODUCTION_POOLS
    cells, budgets = [], []
    for (role, bf16), _ in pinned.items():
        running = 64 if role == "decode" else None  # as test_capacity.PRODUCTION declares them
        cell = Cell("deepseek-v4-flash", role, running, 524288, 4, bf16)
        fraction = 0.83 if role == "decode" else 0.78
        cells.append(cell)
        budgets.append([budget(cell, fraction)])
    results = sglang(cells, budgets)
    got = {key: result[0]["max_total_num_tokens"] for key, result in zip(pinned, results, strict=True)}
    assert got == pinned
