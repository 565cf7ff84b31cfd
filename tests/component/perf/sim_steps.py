"""The simulator's step table (sim/sglang_sim/step_tables/): the production envelope's model and tp priced by
AIConfigurator with the time model's default corrections (sglang_perf_corrections) over sglang_perf_table's grid.
`make sim-steps` writes it; test_step_table.py checks the committed one
against what AIConfigurator answers now.

    .venv/bin/python tests/component/perf/sim_steps.py --write sim/sglang_sim/step_tables/<name>.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf import aic_model
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_aic import AicSteps, PerfVenvMissing
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_corrections import default_corrections
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_table import Grid, build_table, save, table_name

REPO = Path(__file__).resolve().parents[3]
TABLES = REPO / "sim" / "sglang_sim" / "step_tables"
# The production envelope (group_vars, inventories/*/group_vars/all/00-envelope.yml): DeepSeek-V4-Flash with MXFP4
# experts, tp 4 (ep 4), 8,192-token chunks, decode batches up to 256, contexts up to 524,288.
GRID = Grid(aic_model("deepseek-v4-flash", "mxfp4"), tp=4, ep=4, chunk=8192, max_batch=256, max_context=524_288)
TABLE = TABLES / table_name(GRID.model, GRID.tp)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path, default=TABLE, help=f"where to write the table (default {TABLE})")
    args = parser.parse_args(argv)
    steps = AicSteps()
    try:
        steps.version()
    except PerfVenvMissing as exc:
        print(exc, file=sys.stderr)
        return 1
    table = build_table(default_corrections(steps), GRID)
    save(table, args.write)
    print(f"{args.write}: {len(table.prefill)} prefill and {len(table.decode)} decode points ({table.origin})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
