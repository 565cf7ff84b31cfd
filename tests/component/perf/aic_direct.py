"""The conformance test's own call of AIConfigurator (run in its venv): for each cell, cli_estimate's TTFT of one
prefill pass (static_ctx) or TPOT of one decode step (static_gen), straight from the package."""

import contextlib
import json
import logging
import sys

logging.disable(logging.WARNING)
cells = json.load(sys.stdin)
with contextlib.redirect_stdout(sys.stderr):
    from aiconfigurator.cli.api import cli_estimate

    out = []
    for c in cells:
        r = cli_estimate(
            c["model"],
            "h200_sxm",
            mode=c["mode"],
            backend_name="sglang",
            database_mode="HYBRID",
            isl=c["isl"],
            osl=2,
            batch_size=c["batch"],
            tp_size=c["tp"],
            moe_ep_size=c["tp"],
        )
        out.append({"ms": r.ttft if c["mode"] == "static_ctx" else r.tpot})
json.dump(out, sys.stdout)
