"""The conformance test's own call of AIConfigurator (run in its venv): for each cell, cli_estimate's TTFT of one
prefill pass (static_ctx) or TPOT of one decode step (static_gen), straight from the package."""

import contextlib
import functools
import json
import logging
import sys

import yaml

logging.disable(logging.WARNING)
cells = json.load(sys.stdin)
with contextlib.redirect_stdout(sys.stderr):
    # The same documents into the same values, in libyaml's parser instead of PyYAML's Python one: cli_estimate
    # reads about 230 YAML files a call to find the database version (0.8 s of its 1.2 s).
    if yaml.__with_libyaml__:
        yaml.safe_load = functools.partial(yaml.load, Loader=yaml.CSafeLoader)
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
