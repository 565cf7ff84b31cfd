"""The simulator's committed step table (sim/sglang_sim/step_tables/, `make sim-steps`) against AIConfigurator now:
every grid point equal to what the estimator answers for it, and the table's interpolation close to the estimator off
the grid, at the shapes the simulator's tests and the lab run."""

from __future__ import annotations

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf import DecodeQuery, PrefillQuery
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_aic import AicSteps
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_table import FIELDS, TableSteps, build_table, load
from sim_steps import GRID, TABLE


def test_the_committed_table_is_what_the_estimator_answers(aic: AicSteps) -> None:
    committed = load(TABLE)
    assert committed.grid == GRID, "the committed table is of another grid than `make sim-steps` writes"
    fresh = build_table(aic, committed.grid)
    assert (fresh.origin, fresh.data_version) == (committed.origin, committed.data_version)
    assert set(fresh.prefill) == set(committed.prefill) and set(fresh.decode) == set(committed.decode)
    pairs = (("prefill", committed.prefill, fresh.prefill), ("decode", committed.decode, fresh.decode))
    differ = [
        (kind, key, name, old, new)
        for kind, ours, theirs in pairs
        for key in ours
        for name, old, new in zip(FIELDS, ours[key], theirs[key], strict=True)
        if new != pytest.approx(old, rel=1e-6, abs=1e-9)
    ]
    assert not differ, (
        f"{len(differ)} values differ (kind, point, field, then, now); run `make sim-steps`: {differ[:5]}"
    )


def test_off_the_grid_the_table_is_close_to_the_estimator(aic: AicSteps) -> None:
    m = GRID.model
    prefills = [
        PrefillQuery(m, 4, 4, 1000, 0, 8),  # the simulator's test: 8 prompts of 1,000 tokens a pass
        PrefillQuery(m, 4, 4, 3000, 0, 2),
        PrefillQuery(m, 4, 4, 199_000, 196_608, 1),  # the partial last chunk of a 199,000-token prompt
    ]
    decodes = [DecodeQuery(m, 4, 4, 1016, 16), DecodeQuery(m, 4, 4, 100_000, 48), DecodeQuery(m, 4, 4, 200_500, 55)]
    table = TableSteps(load(TABLE))
    p_aic, d_aic = aic.both(prefills, decodes)
    ours = table.prefill(prefills) + table.decode(decodes)
    for query, theirs, mine in zip([*prefills, *decodes], p_aic + d_aic, ours, strict=True):
        assert mine.ms == pytest.approx(theirs.ms, rel=0.05), query
