"""A StepSource over a table of step times: a grid asked once of another source (AIConfigurator, sglang_perf_aic),
saved as JSON, answered by interpolation where the estimator cannot run (the simulator on the lab hosts).

The grid, for one model, tp and ep:
- prefill passes of prompts up to the chunk, by (isl, batch): isl 128, 256, ... up to the chunk, batch 1, 2, 4, ...
  while isl * batch fits the chunk;
- the chunks of a long prompt, by prefix: one full chunk on 0, 1, 2, 4, 8, 16, 24, ... chunks already cached, up to
  the last chunk of max_context;
- decode steps by (context, batch): context 256, 1k, 4k, 16k, 32k, 64k, ... up to max_context, batch 1, 2, 4, ...
  up to max_batch.

Between grid points every field of a StepTime is linear in each coordinate (so a monotone grid answers monotone);
beyond the last point it goes on along the last segment; below the first it is clamped. A prompt shorter than the
smallest isl counts as fewer prompts of that isl (the same tokens); a partial chunk on a prefix is the short pass
of its length plus the growth a full chunk has on that prefix, in proportion to its length.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf import (
    BatchedStepSource,
    DecodeQuery,
    PrefillQuery,
    StepSource,
    StepTime,
)

FORMAT = 1
FIELDS = ("ms", "measured_ms", "extrapolated_ms", "sol_ms", "attention_ms")
MIN_ISL = 128
MIN_CONTEXT = 256

Values = tuple[float, ...]


@dataclass(frozen=True)
class Grid:
    """Where a table is priced: one model, tp and ep; prompts up to `chunk`, contexts up to `max_context`, decode
    batches up to `max_batch`."""

    model: str
    tp: int
    ep: int
    chunk: int = 8192
    max_batch: int = 256
    max_context: int = 524_288

    def short_points(self) -> list[tuple[int, int]]:
        """(isl, batch) of the short prefill passes."""
        points = []
        for isl in _doubling(MIN_ISL, self.chunk):
            batch = 1
            while batch == 1 or isl * batch <= self.chunk:
                points.append((isl, batch))
                batch *= 2
        return points

    def chunk_prefixes(self) -> list[int]:
        """Prefixes (tokens already cached) of the full chunks priced, 0 included."""
        last = max(0, (self.max_context - 1) // self.chunk)  # index of the chunk holding the last token
        picks = {k for k in (0, 1, 2, 4, 8) if k <= last} | set(range(16, last, 8)) | {last}
        return [k * self.chunk for k in sorted(picks)]

    def decode_points(self) -> list[tuple[int, int]]:
        """(context, batch) of the decode steps."""
        contexts = sorted({MIN_CONTEXT, 1024, 4096, *_doubling(16_384, self.max_context)})
        contexts = [c for c in contexts if c <= self.max_context]
        return [(c, b) for c in contexts for b in _doubling(1, self.max_batch)]

    def prefill_queries(self) -> list[PrefillQuery]:
        m, tp, ep = self.model, self.tp, self.ep
        short = [PrefillQuery(m, tp, ep, isl, 0, b) for isl, b in self.short_points()]
        chunks = [PrefillQuery(m, tp, ep, p + self.chunk, p, 1) for p in self.chunk_prefixes() if p > 0]
        return short + chunks

    def decode_queries(self) -> list[DecodeQuery]:
        return [DecodeQuery(self.model, self.tp, self.ep, c, b) for c, b in self.decode_points()]


def _doubling(start: int, end: int) -> list[int]:
    """start, 2*start, ... up to end, and end itself."""
    out = []
    value = start
    while value < end:
        out.append(value)
        value *= 2
    return [*out, end]


@dataclass(frozen=True)
class StepTable:
    """Step times on a Grid: prefill by (isl, prefix, batch), decode by (context, batch); every StepTime's origin and
    data version are the table's."""

    grid: Grid
    origin: str
    data_version: str
    prefill: dict[tuple[int, int, int], Values]
    decode: dict[tuple[int, int], Values]

    def as_json(self) -> dict[str, Any]:
        g = self.grid
        return {
            "format": FORMAT,
            "model": g.model,
            "tp": g.tp,
            "ep": g.ep,
            "chunk": g.chunk,
            "max_batch": g.max_batch,
            "max_context": g.max_context,
            "origin": self.origin,
            "data_version": self.data_version,
            "fields": list(FIELDS),
            "prefill": [[*key, *values] for key, values in sorted(self.prefill.items())],
            "decode": [[*key, *values] for key, values in sorted(self.decode.items())],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StepTable:
        if data.get("format") != FORMAT or data.get("fields") != list(FIELDS):
            raise ValueError(f"not a step table of format {FORMAT} with fields {list(FIELDS)}")
        grid = Grid(
            str(data["model"]),
            int(data["tp"]),
            int(data["ep"]),
            int(data["chunk"]),
            int(data["max_batch"]),
            int(data["max_context"]),
        )
        n = len(FIELDS)
        prefill = {(int(r[0]), int(r[1]), int(r[2])): tuple(float(v) for v in r[3 : 3 + n]) for r in data["prefill"]}
        decode = {(int(r[0]), int(r[1])): tuple(float(v) for v in r[2 : 2 + n]) for r in data["decode"]}
        return cls(grid, str(data["origin"]), str(data["data_version"]), prefill, decode)


def build_table(steps: StepSource, grid: Grid) -> StepTable:
    """The table of `grid`, asked of `steps` in one round (one estimator process for a BatchedStepSource)."""
    pq, dq = grid.prefill_queries(), grid.decode_queries()
    if isinstance(steps, BatchedStepSource):
        p_times, d_times = steps.both(pq, dq)
    else:
        p_times, d_times = steps.prefill(pq), steps.decode(dq)
    origins = {(t.origin, t.data_version) for t in [*p_times, *d_times]}
    if len(origins) != 1:
        raise ValueError(f"the step source answered from several origins: {sorted(origins)}")
    ((origin, version),) = origins
    return StepTable(
        grid,
        origin,
        version,
        {(q.isl, q.prefix, q.batch): _values(t) for q, t in zip(pq, p_times, strict=True)},
        {(q.context, q.batch): _values(t) for q, t in zip(dq, d_times, strict=True)},
    )


def table_name(model: str, tp: int) -> str:
    """A model's table file at `tp`: deepseek-ai/DeepSeek-V4-Flash, 4 -> deepseek-ai--deepseek-v4-flash-tp4.json."""
    return f"{model.lower().replace('/', '--')}-tp{tp}.json"


def _values(step: StepTime) -> Values:
    return tuple(float(getattr(step, name)) for name in FIELDS)


def save(table: StepTable, path: Path) -> None:
    """Write a table as JSON, one grid point a line."""
    data = table.as_json()
    head = {k: v for k, v in data.items() if k not in ("prefill", "decode")}
    lines = [json.dumps(head)[:-1] + ","]
    for key in ("prefill", "decode"):
        rows = [json.dumps(row) for row in data[key]]
        lines.append(f' "{key}": [')
        lines += [f"  {row}," for row in rows[:-1]] + [f"  {rows[-1]}"]
        lines.append(" ]," if key == "prefill" else " ]")
    lines.append("}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def load(path: Path) -> StepTable:
    return StepTable.from_json(json.loads(Path(path).read_text()))


# ---------------------------------------------------------------- interpolation


def _segment(xs: Sequence[float], x: float) -> tuple[int, int, float]:
    """Indices (lo, hi) of the segment of sorted `xs` for x and the weight of hi: clamped below the first point,
    the last segment extended beyond the last; a single point is returned alone (weight 0)."""
    if len(xs) == 1 or x <= xs[0]:
        return 0, 0, 0.0
    i = min(bisect.bisect_left(xs, x), len(xs) - 1)
    if xs[i] == x:
        return i, i, 0.0
    lo, hi = i - 1, i
    return lo, hi, (x - xs[lo]) / (xs[hi] - xs[lo])


def _mix(a: Values, b: Values, w: float) -> Values:
    return a if w == 0.0 else tuple(max(0.0, u + (v - u) * w) for u, v in zip(a, b, strict=True))


def _along(xs: Sequence[float], value_at: Callable[[int], Values], x: float) -> Values:
    lo, hi, w = _segment(xs, x)
    return _mix(value_at(lo), value_at(hi), w)


class TableSteps:
    """A StepSource answering from a StepTable (see the module's text for how it interpolates)."""

    def __init__(self, table: StepTable) -> None:
        self.table = table
        g = table.grid
        self._short: dict[int, tuple[list[float], list[Values]]] = {}
        for (isl, prefix, batch), values in sorted(table.prefill.items()):
            if prefix == 0:
                xs, vs = self._short.setdefault(isl, ([], []))
                xs.append(float(batch))
                vs.append(values)
        self._isls = sorted(self._short)
        self._prefixes = [float(p) for p in g.chunk_prefixes()]
        self._chunk_values = [table.prefill[(p + g.chunk, p, 1) if p else (g.chunk, 0, 1)] for p in g.chunk_prefixes()]
        contexts = sorted({c for c, _b in table.decode})
        self._contexts = [float(c) for c in contexts]
        self._decode = [
            ([float(b) for _c, b in sorted(k for k in table.decode if k[0] == c)],
             [table.decode[k] for k in sorted(k for k in table.decode if k[0] == c)])
            for c in contexts
        ]  # fmt: skip

    @classmethod
    def load(cls, path: Path) -> TableSteps:
        return cls(load(path))

    def _check(self, model: str, tp: int, ep: int) -> None:
        g = self.table.grid
        if (model, tp, ep) != (g.model, g.tp, g.ep):
            raise ValueError(
                f"the step table holds {g.model} at tp {g.tp}, ep {g.ep}; asked for {model} at tp {tp}, ep {ep}"
            )

    def _step(self, values: Values) -> StepTime:
        ms, measured, extrapolated, sol, attention = values
        return StepTime(ms, measured, extrapolated, sol, attention, self.table.origin, self.table.data_version)

    def prefill(self, queries: Sequence[PrefillQuery]) -> list[StepTime]:
        out = []
        for q in queries:
            self._check(q.model, q.tp, q.ep)
            if q.isl <= q.prefix or q.prefix < 0 or q.batch < 1:
                raise ValueError(f"not a prefill pass: {q}")
            found = self.table.prefill.get((q.isl, q.prefix, q.batch))
            out.append(self._step(found if found is not None else self._prefill(q.isl - q.prefix, q.prefix, q.batch)))
        return out

    def decode(self, queries: Sequence[DecodeQuery]) -> list[StepTime]:
        out = []
        for q in queries:
            self._check(q.model, q.tp, q.ep)
            if q.batch < 1:
                raise ValueError(f"not a decode step: {q}")
            found = self.table.decode.get((q.context, q.batch))
            out.append(self._step(found if found is not None else self._decode_at(float(q.context), float(q.batch))))
        return out

    def _decode_at(self, context: float, batch: float) -> Values:
        def row(i: int) -> Values:
            xs, vs = self._decode[i]
            return _along(xs, vs.__getitem__, batch)

        return _along(self._contexts, row, context)

    def _short_pass(self, isl: int, batch: float) -> Values:
        """A pass of `batch` prompts of `isl` tokens on nothing cached."""
        if isl < self._isls[0]:
            isl, batch = self._isls[0], max(1.0, batch * isl / self._isls[0])

        def row(i: int) -> Values:
            xs, vs = self._short[self._isls[i]]
            if len(xs) == 1 and batch > xs[0]:  # a prompt of the whole chunk: more of them take proportionally longer
                return tuple(v * batch / xs[0] for v in vs[0])
            return _along(xs, vs.__getitem__, batch)

        return _along([float(i) for i in self._isls], row, float(isl))

    def _prefill(self, length: int, prefix: int, batch: int) -> Values:
        chunk = self.table.grid.chunk
        if prefix == 0:
            return self._short_pass(length, float(batch))
        grown = _along(self._prefixes, self._chunk_values.__getitem__, float(prefix))
        if length == chunk and batch == 1:
            return grown
        base = self._short_pass(length, float(batch))
        scale = batch * length / chunk
        return tuple(max(0.0, b + (g - z) * scale) for b, g, z in zip(base, grown, self._chunk_values[0], strict=True))
