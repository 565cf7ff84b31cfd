"""Every measured point we know, through the CLI's own path, inside the band printed for its own shape.

The path is the one `sglang-envelope plan` and `check-request` take: the inventory as ansible-inventory resolves it
(sglang_envelope_cli.commands.load_inventory), the default step source (AIConfigurator 0.12.0 with the default
corrections), the fleet's calibration to its own sglang_perf_measured, and the figure with its band as
sglang_perf_fleet.predicted_times prints it. A point that leaves its band fails the test.

Like for like, each point's setup as it was measured:
- this deployment: PD, tp 4, bf16 index keys, PCIe between the GPUs (inventories/production), one call at a time of
  16,384 in (its recall runs had 8k-22k prompts) and 1,000 out: 64 tokens/s, an ITL of 15.6 ms;
- SGLang's DeepSeek-V4 cookbook, H200 flash low-latency cells (SGLang 0.5.15; deepseek-v4-benchmarks.jsx, recipe
  in deepseek-v4.jsx: one aggregated engine, --tp 4, EAGLE 3-1-4): TTFT at concurrency 1, 237 ms with the MXFP4
  checkpoint and 178 ms with FP8. bench_serving's random dataset with --random-input-len 8192 and the default
  --random-range-ratio 0 draws prompts uniformly from 1 to 8,192 tokens: the median call is 4,096 in. An aggregated
  engine hands no KV over (transfer backend `fake`), an SXM node has NVLink; speculative decoding adds the draft's
  prefill to the TTFT, a few per cent, and is not modelled (inside the band).
- sgl-project/sglang pull request 33109 (4xH200, SGLang 0.5.16, DeepSeek-V4-Flash-0731 with a DSpark draft head):
  P50 TTFT 308.29 ms of one 8,192-token call, of which the PR puts 27 % on DSpark; the target's share, 225 ms.
  Another checkpoint of the same architecture.

Found and left out: the cookbook's TPOT (speculative decoding: a verify step of 4 tokens is not a decode step), its
balanced and high-throughput cells (aggregated batches mix prefill chunks into decode steps, which a PD model does
not have), and the lab's bench (its engines are the simulator running this model's own step table: a check of the
composition, tests/lab/stack/test_lab_time.py, not of the step times).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_perf_fleet as perf
from perftools import REPO, model_config
from sglang_envelope_cli import commands as cli

COOKBOOK = (
    "SGLang's DeepSeek-V4 cookbook, docs_new/src/snippets/configs/deepseek-ai/deepseek-v4-benchmarks.jsx (H200 flash "
    "{quant} low-latency, SGLang 0.5.15), recipe in deepseek-v4.jsx"
)
PR_33109 = "https://github.com/sgl-project/sglang/pull/33109 (4xH200, SGLang 0.5.16, DeepSeek-V4-Flash-0731)"


@dataclass(frozen=True)
class Point:
    name: str
    source: str
    inventory: str  # "production", or "cookbook-<quantization>": the cookbook's engine (cookbook())
    calls: int
    input_tokens: int
    output_tokens: int
    figure: str  # a key of predicted_times' answer
    measured_ms: float


POINTS = [
    Point(
        "this deployment: single-stream decode, 64 tokens/s",
        "inventories/production/group_vars/all/perf.yml",
        "production",
        1,
        16_384,
        1000,
        "itl_p50",
        1000.0 / 64,
    ),
    Point(
        "cookbook, MXFP4: TTFT at concurrency 1",
        COOKBOOK.format(quant="fp4"),
        "cookbook-mxfp4",
        1,
        4096,
        1024,
        "ttft_p50",
        237.0,
    ),
    Point(
        "cookbook, FP8: TTFT at concurrency 1",
        COOKBOOK.format(quant="fp8"),
        "cookbook-fp8",
        1,
        4096,
        1024,
        "ttft_p50",
        178.0,
    ),
    Point(
        "PR 33109: P50 TTFT less DSpark's 27 %", PR_33109, "cookbook-mxfp4", 1, 8192, 2, "ttft_p50", 308.29 * (1 - 0.27)
    ),
]


def cookbook(hostvars: dict[str, Any], quantization: str) -> dict[str, Any]:
    """The production host as the cookbook's engine: NVLink (an SXM node), no KV transfer (one aggregated engine),
    the cell's quantization, and none of this fleet's measurements."""
    out = copy.deepcopy(hostvars)
    for hv in out.values():
        hv["sglang_interconnect"] = "nvlink"
        hv.pop("sglang_perf_measured", None)
        hv["sglang_engine_common"] = {**hv["sglang_engine_common"], "disaggregation_transfer_backend": "fake"}
        hv["sglang_model"] = {**hv["sglang_model"], "quantization": quantization}
        hv["sglang_model"].pop("params_b", None)
    return out


@pytest.fixture(scope="module")
def production() -> tuple[dict[str, Any], dict[str, list[str]]]:
    return cli.load_inventory(str(REPO / "inventories" / "production"))


def predicted(point: Point, production: tuple[dict[str, Any], dict[str, list[str]]]) -> dict[str, Any]:
    hostvars, groups = production
    if point.inventory.startswith("cookbook-"):
        hostvars = cookbook(hostvars, point.inventory.removeprefix("cookbook-"))
    shape = (point.calls, point.input_tokens + point.output_tokens)
    (answer,) = perf.predicted_times(
        hostvars, groups, model_config("deepseek-v4-flash"), [shape], osl=point.output_tokens
    )
    assert "error" not in answer, answer
    return answer


@pytest.mark.parametrize("point", POINTS, ids=[p.name for p in POINTS])
def test_every_measured_point_lies_inside_the_band_printed_for_its_shape(
    point: Point, production: tuple[dict[str, Any], dict[str, list[str]]]
) -> None:
    figure = predicted(point, production)[point.figure]
    print(f"{point.name}: measured {point.measured_ms:,.2f} ms, printed {figure['text']}")
    assert figure["low_ms"] <= point.measured_ms <= figure["high_ms"], (
        f"{point.name} ({point.source}): measured {point.measured_ms:,.2f} ms lies outside the band printed for its "
        f"shape, {figure['text']}"
    )


def test_production_decodes_at_its_measured_speed_by_default_and_prints_the_uncalibrated_figure(
    production: tuple[dict[str, Any], dict[str, list[str]]],
) -> None:
    """Calibrated by default: one call of 16,384 in prints an ITL within 15 % of the measured 15.6 ms (64 tokens/s),
    the band is the calibrated one (no 'mean error'), and the uncalibrated figure stands beside it, marked."""
    answer = predicted(POINTS[0], production)
    itl = answer["itl_p50"]
    assert abs(itl["ms"] / POINTS[0].measured_ms - 1) <= 0.15
    assert "calibrated to 1 point(s) of this fleet" in itl["source"]
    assert "mean error" not in itl["text"]
    hostvars, groups = production
    fleet = perf.fleet_from_inventory(hostvars, groups)
    steps = perf.fleet_steps(fleet, model_config("deepseek-v4-flash"), perf.default_steps())
    lines = perf.request_times(fleet, model_config("deepseek-v4-flash"), 16_384, 1000, steps)
    assert any(line.strip().startswith("ITL p50 ") and "[uncalibrated: " in line for line in lines), lines
