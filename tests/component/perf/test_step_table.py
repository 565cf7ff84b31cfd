"""The simulator's committed step table (sim/sglang_sim/step_tables/, `make sim-steps`) against AIConfigurator now,
with the time model's default corrections (sglang_perf_corrections) as the table is built:
the grid points of a sample across the table equal to what the estimator answers for them, and the table's
interpolation close to the estimator off the grid, at the shapes the simulator's tests and the lab run."""

from __future__ import annotations

from typing import Any, TypeVar

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf import DecodeQuery, PrefillQuery
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_aic import AicSteps
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_corrections import default_corrections
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_table import FIELDS, TableSteps, load
from sim_steps import GRID, TABLE

T = TypeVar("T")


# Every SAMPLE-th grid point of each kind, the last one too, is asked of the estimator again (the whole grid is
# 120 estimator queries, about 4 minutes on 2 cores without the estimator's cache; `make sim-steps` asks them all).
SAMPLE = 6


def sampled(queries: list[T]) -> list[T]:
    return [*queries[::SAMPLE], *([queries[-1]] if (len(queries) - 1) % SAMPLE else [])]


def test_the_committed_table_is_what_the_estimator_answers(aic: AicSteps) -> None:
    committed = load(TABLE)
    assert committed.grid == GRID, "the committed table is of another grid than `make sim-steps` writes"
    pq, dq = sampled(GRID.prefill_queries()), sampled(GRID.decode_queries())
    assert set(committed.prefill) == {(q.isl, q.prefix, q.batch) for q in GRID.prefill_queries()}
    assert set(committed.decode) == {(q.context, q.batch) for q in GRID.decode_queries()}
    p_times, d_times = default_corrections(aic).both(pq, dq)
    assert {(t.origin, t.data_version) for t in [*p_times, *d_times]} == {(committed.origin, committed.data_version)}
    points: list[tuple[str, tuple[int, ...], dict[Any, Any], Any]] = [
        *(("prefill", (q.isl, q.prefix, q.batch), committed.prefill, t) for q, t in zip(pq, p_times, strict=True)),
        *(("decode", (q.context, q.batch), committed.decode, t) for q, t in zip(dq, d_times, strict=True)),
    ]
    differ = [
        (kind, key, name, old, getattr(now, name))
        for kind, key, ours, now in points
        for name, old in zip(FIELDS, ours[key], strict=True)
        if float(getattr(now, name)) != pytest.approx(old, rel=1e-6, abs=1e-9)
    ]
    assert len(points) >= 20
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
    p_aic, d_aic = default_corrections(aic).both(prefills, decodes)
    ours = table.prefill(prefills) + table.decode(decodes)
    for query, theirs, mine in zip([*prefills, *decodes], p_aic + d_aic, ours, strict=True):
        assert mine.ms == pytest.approx(theirs.ms, rel=0.05), query
