"""Predicted TTFT and ITL of a declared fleet (default: inventories/production, one prefill and one decode engine,
tp 4, bf16 index keys, router admission) for a few workload shapes, each figure with its band and source. The fleet's
shape comes from the inventory through plugins/plugin_utils/sglang_perf_fleet.py, as the planner reads it.

Run: .venv/bin/python bench/perf_table.py [--inventory DIR] [--steps default|uncalibrated|estimator] [NxISL[:OSL] ...]
     (default: 1x4k 16x32k 55x200k 100x200k, OSL 1,000; steps as every command takes them: the estimator with the
     default corrections, calibrated to the inventory's measured points; `uncalibrated` leaves the calibration out,
     `estimator` the corrections too)
Needs `make perf-venv`; the first run asks AIConfigurator (a minute or two), later runs read .cache/perf/.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf import Workload
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_aic import AicSteps
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_corrections import default_corrections
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_fleet import (
    fleet_steps,
    predict_shapes,
    shape_of,
    time_header,
)
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_plan import fleet_from_inventory

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "cli"))
from sglang_envelope_cli.commands import load_inventory, model_config_for  # noqa: E402

SHAPES = ["1x4k", "16x32k", "55x200k", "100x200k"]


def shape(text: str) -> Workload:
    calls, _, rest = text.partition("x")
    isl, _, osl = rest.partition(":")
    tokens = int(float(isl.rstrip("kK")) * (1000 if isl[-1] in "kK" else 1))
    return Workload(isl=tokens, osl=int(osl or 1000), concurrency=int(calls))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--inventory", default=str(REPO / "inventories" / "production"))
    parser.add_argument("--steps", choices=("default", "uncalibrated", "estimator"), default="default")
    parser.add_argument("shapes", nargs="*", default=SHAPES)
    args = parser.parse_args()
    hostvars, groups = load_inventory(args.inventory)
    fleet = fleet_from_inventory(hostvars, groups)
    config = model_config_for(hostvars[fleet.hosts("decode")[0]])
    workloads = [shape(s) for s in args.shapes]
    # the running limit of each row: what the fleet answer runs of calls that long at once
    cases = [(shape_of(fleet, config, w.isl + w.osl), w) for w in workloads]
    estimator = AicSteps()
    steps = {
        "default": fleet_steps(fleet, config, default_corrections(estimator)),
        "uncalibrated": default_corrections(estimator),
        "estimator": estimator,
    }[args.steps]
    assert steps is not None
    preds = predict_shapes(cases, steps)
    print(time_header(steps))
    first = cases[0][0]
    print(
        f"{args.inventory}: {first.prefill_engines} prefill + {first.decode_engines} decode engine(s), "
        f"tp {first.prefill_tp}, {first.model} on h200_sxm,"
    )
    print(f"chunked_prefill_size {first.chunked_prefill_size}, decode running limit per engine per row below,")
    print(
        f"bf16 index keys (x{first.key_ratio:.2f} key width), router admits "
        f"{first.router_max_concurrent}, {first.transfer_backend} at {first.transfer_bytes_per_s / 1e9:g} GB/s/GPU"
    )
    for (fleet_shape, w), p in zip(cases, preds, strict=True):
        print(
            f"\n{w.concurrency} calls x {w.isl:,} in / {w.osl:,} out: binding {p.binding}; "
            f"{p.calls_per_s * 60:.2f} calls/min; decode batch {p.decode_batch:.1f} "
            f"(running limit {fleet_shape.decode_max_running})"
        )
        print(f"  TTFT p50     {p.ttft_p50.text()}")
        print(f"  TTFT p90     {p.ttft_p90.text()}")
        print(f"  TTFT steady  {p.ttft_steady.text()}")
        print(f"  ITL p50      {p.itl_p50.text('ms')}")
        print(f"  ITL p90      {p.itl_p90.text('ms')}")
        print(f"  ITL all in   {p.itl_full.text('ms')}")
        print(f"  output       {p.tokens_per_s_per_call:.0f} tokens/s per call (at ITL p50)")
        for term in p.terms:
            print(f"    {term.name:<34} {term.ms:>12,.1f} ms  {term.source}")
        for note in p.notes[2:]:
            print(f"  ! {note}")
    print("\nbands: " + "; ".join(preds[0].notes[:-1]) + "; terms of our model carry no published error.")
    print(preds[0].notes[-1])


if __name__ == "__main__":
    main()
