"""The time model as the verify suite reads it: one call's predicted TTFT and ITL on the declared fleet
(plugin_utils/sglang_perf_fleet.py over AIConfigurator's step data), at the simulator's speed factor where the
engines are the simulator. Needs the estimator's venv on the controller (make perf-venv)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_perf_fleet as perf
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf import Prediction, Workload
from verify_expect import REPO, inventory_fleet


def predicted(runner: Any, isl: int, osl: int) -> tuple[Prediction, float | None]:
    """The model's prediction for one call of isl + osl tokens alone on the declared fleet, at the simulator's speed
    factor (perf.at_speed), and that factor (None: real engines)."""
    hostvars, groups = inventory_fleet({h: runner.get_variables(h) for h in runner.get_hosts("all")})
    engine = (groups.get("sglang_decode") or groups.get("sglang_prefill") or [""])[0]
    name = (hostvars.get(engine, {}).get("sglang_model") or {}).get("name")
    config = REPO / "models" / str(name) / "config.json"
    if not config.is_file():
        pytest.fail(f"sglang_model.name={name!r}: no {config}; fix: add the model's config.json there", pytrace=False)
    steps = perf.default_steps()
    if steps is None:
        pytest.fail(
            "the time model's estimator is not installed on this controller (.cache/aiconfigurator-venv); fix: run "
            "`make perf-venv`",
            pytrace=False,
        )
    shape = perf.fleet_shape_of(hostvars, groups, json.loads(config.read_text()), isl + osl)
    factor = perf.sim_speed_factor(hostvars, groups)
    try:
        (pred,) = perf.predict_shapes([(shape, Workload(isl=isl, osl=osl, concurrency=1))], steps)
    except perf.TimeUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    return perf.at_speed(pred, factor), factor
