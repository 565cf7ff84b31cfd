"""The terms of the time model that AIConfigurator does not have, each a pure function tested alone
(tests/component/perf/test_terms.py): chunk positions, FIFO order statistics, M/D/1 waiting, KV transfer, bf16 index
keys, the decode-batch ladder. Every one is "our model"; sglang_perf.py composes them over measured step times."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

# Chunked prefill: at most this many chunk positions are priced by the step source; the rest are interpolated.
CHUNK_SAMPLES = 5

# Declared KV-transfer bandwidth per GPU (bytes/s) by transfer backend, when the fleet declares none: one 200 Gb/s
# RDMA link per GPU at 80 % for mooncake and nixl; a 25 Gb/s TCP path at 80 % for mooncake_tcp. Our model.
TRANSFER_BYTES_PER_S = {"mooncake": 20e9, "nixl": 20e9, "mori": 20e9, "mooncake_tcp": 2.5e9, "fake": math.inf}


def transfer_bytes_per_s(backend: str) -> float:
    """The KV transfer rate of a backend; one not listed moves at the RDMA backends' 20e9."""
    return TRANSFER_BYTES_PER_S.get(backend, 20e9)


def chunk_spans(isl: int, chunk: int) -> list[tuple[int, int]]:
    """(prefix, end) of each prefill pass of one prompt of `isl` tokens with chunked_prefill_size `chunk`:
    chunk k computes tokens [k*chunk, min((k+1)*chunk, isl)) on top of the k*chunk already in the cache."""
    if isl <= 0 or chunk <= 0:
        raise ValueError(f"isl and chunk must be > 0 (isl={isl}, chunk={chunk})")
    return [(start, min(start + chunk, isl)) for start in range(0, isl, chunk)]


def sampled_chunks(n_chunks: int, samples: int = CHUNK_SAMPLES) -> list[int]:
    """Chunk indices to price: all when there are few; else `samples - 1` evenly spaced over the full chunks
    (first and last full chunk included) plus the final one, which may be partial and is priced on its own."""
    if n_chunks <= samples:
        return list(range(n_chunks))
    full = n_chunks - 1  # indices 0 .. full-1 are full chunks
    picks = {round(i * (full - 1) / (samples - 2)) for i in range(samples - 1)}
    return sorted(picks | {n_chunks - 1})


def interpolate_chunks(n_chunks: int, priced: dict[int, float]) -> float:
    """Sum of all chunk times from the priced ones: full chunks between two priced indices are linear in the index
    (each chunk's attention grows with its prefix, everything else is constant); the final chunk is priced as is."""
    last = n_chunks - 1
    total = priced[last]
    full = sorted(i for i in priced if i != last)
    if not full:
        return total
    for i in range(last):
        lo = max((k for k in full if k <= i), default=full[0])
        hi = min((k for k in full if k >= i), default=full[-1])
        if lo == hi:
            total += priced[lo]
        else:
            total += priced[lo] + (priced[hi] - priced[lo]) * (i - lo) / (hi - lo)
    return total


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile of `values`, linearly interpolated between the two nearest ranks: numpy.percentile's default
    rule, the one sglang.bench_serving reports its p50/p90/p99 with, so a prediction and a benchmark of the same
    wave are read the same way."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def fifo_finish_times(calls: int, engines: int, per_pass: int, pass_ms: float) -> list[float]:
    """When each of `calls` prompts arriving together finishes prefill: spread round-robin over `engines`, each
    engine serves its share first in, first out, `per_pass` prompts a pass of `pass_ms`."""
    if calls <= 0:
        return []
    times = []
    for engine in range(engines):
        share = calls // engines + (1 if engine < calls % engines else 0)
        times += [math.ceil(k / per_pass) * pass_ms for k in range(1, share + 1)]
    return times


def md1_wait_quantile(rate_per_ms: float, service_ms: float, q: float) -> float:
    """Waiting time before service at quantile q in an M/D/1 queue (Poisson arrivals, one server, constant service):
    the mean is rho*S/(2(1-rho)) (Pollaczek-Khinchine); the tail is taken exponential with an atom rho of waiting,
    P(W > t) = rho*exp(-t*rho/Wq), so t_q = (Wq/rho)*ln(rho/(1-q)) when rho > 1-q, else 0. Infinite when rho >= 1."""
    rho = rate_per_ms * service_ms
    if rho >= 1:
        return math.inf
    if rho <= 1 - q or rho == 0:
        return 0.0
    mean_wait = rho * service_ms / (2 * (1 - rho))
    return mean_wait / rho * math.log(rho / (1 - q))


def transfer_ms(tokens: int, bytes_per_token: float, bytes_per_s: float) -> float:
    """KV of one prompt from the prefill to the decode engine: every rank sends its own copy of the (MLA-style,
    unsharded) compressed cache over its own link at the declared bandwidth, so time = tokens * bytes / bandwidth."""
    if bytes_per_s <= 0:
        raise ValueError("transfer bandwidth must be > 0")
    return 0.0 if math.isinf(bytes_per_s) else tokens * bytes_per_token / bytes_per_s * 1000.0


def bf16_index_extra_ms(attention_ms: float, attention_ref_ms: float, index_share: float, key_ratio: float) -> float:
    """Extra time of bf16 index keys over the fp8 keys the data was measured with: the attention module's part that
    grows with the context (attention_ms - attention_ref_ms, the ref at a short context) is reading keys; the
    indexer's share of those bytes (index_share) is read key_ratio times wider. Our model."""
    growth = max(0.0, attention_ms - attention_ref_ms)
    return growth * index_share * (key_ratio - 1.0)


def batch_ladder(max_batch: int) -> list[int]:
    """Decode batch sizes to price: powers of four below max_batch, and max_batch (step time is close to linear in
    the batch between them; each point is one estimator call)."""
    ladder = [b for b in (1, 4, 16, 64, 256) if b < max_batch]
    return [*ladder, max(1, max_batch)]


def interpolate_batch(points: dict[int, float], batch: float) -> float:
    """Step time at a fractional batch, linear between the priced batch sizes (clamped to their range)."""
    keys = sorted(points)
    if batch <= keys[0]:
        return points[keys[0]]
    for lo, hi in itertools.pairwise(keys):
        if batch <= hi:
            return points[lo] + (points[hi] - points[lo]) * (batch - lo) / (hi - lo)
    return points[keys[-1]]
