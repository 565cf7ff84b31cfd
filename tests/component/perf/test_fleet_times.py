"""The time model on the shipped production inventory, through the bridge the planner, the risks and check-request
use (plugin_utils/sglang_perf_fleet.py), against AIConfigurator itself (aic_direct.py): an idle call of a short
prompt is one prefill pass and one decode step, so the bridge's TTFT and ITL equal the estimator's own numbers up to
the terms of our model (the KV transfer, bf16 index keys), which are set to nothing here (fp8 keys, backend fake)."""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_perf_fleet as perf
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_aic import AicSteps
from perftools import REPO, finish_direct, model_config, start_direct

sys.path.insert(0, str(REPO / "cli"))
from sglang_envelope_cli.commands import load_inventory

PROD = str(REPO / "inventories" / "production")


def test_idle_call_equals_the_estimator(aic: AicSteps) -> None:
    hostvars, groups = copy.deepcopy(load_inventory(PROD))
    hv = hostvars["gpu-node-01"]
    hv["sglang_interconnect"] = "nvlink"  # what AIConfigurator measured; no PCIe term
    hv.pop("sglang_perf_measured", None)  # the estimator's own numbers, not this fleet's calibration
    hv["sglang_engine_common"] = {
        **hv["sglang_engine_common"],
        "bf16_index_k": False,
        "disaggregation_transfer_backend": "fake",
    }
    config = model_config("deepseek-v4-flash")
    (one,) = perf.predicted_times(hostvars, groups, config, [(1, 4096)], osl=2, steps=aic)
    model = "deepseek-ai/DeepSeek-V4-Flash"
    direct = finish_direct(
        start_direct(
            [
                {"model": model, "mode": "static_ctx", "isl": 4094, "batch": 1, "tp": 4},
                {"model": model, "mode": "static_gen", "isl": 4095, "batch": 1, "tp": 4},
            ]
        )
    )
    assert one["ttft_p50"]["ms"] == pytest.approx(direct[0]["ms"], rel=0.02)
    assert one["itl_p50"]["ms"] == pytest.approx(direct[1]["ms"], rel=0.02)
    assert "AIConfigurator 0.12.0" in one["ttft_p90"]["text"] and "extrapolated" in one["ttft_p90"]["text"]


def test_plan_answers_in_time_for_production(capsys: pytest.CaptureFixture[str], aic: AicSteps) -> None:
    """plan --want 100x200k --ttft-p90 60s: today and every option with TTFT, ITL (band and source), the binding
    engine and the SLO verdict; an option that adds prefill hosts meets it."""
    from sglang_envelope_cli.commands import main

    assert main(["plan", "-i", PROD, "--want", "100x200k", "--ttft-p90", "60s"]) == 1  # does not fit today
    out = capsys.readouterr().out
    today = out.split("\ndoes not fit")[0]
    assert "time: 100 call(s) of 199,000 in + 1,000 out arriving at once: bound by the prefill engine" in today
    assert "SLO (TTFT p90 <= 60 s): missed" in today
    options = re.split(r"\noption \d+: ", out)[1:]  # the details of each option, after the summary table
    assert "goodput/GPU" in out.splitlines()[3] and "ranked by goodput per GPU" in out
    assert options and all("TTFT p90 " in b and "ITL p90 " in b and "AIConfigurator 0.12.0" in b for b in options)
    assert any("prefill host" in b.splitlines()[0] and "; meets the SLO)" in b.splitlines()[0] for b in options)
    assert "meets memory, not the SLO" in out
    assert "router_admits_beyond_prefill_slo" in out
    assert Path(PROD).is_dir()
