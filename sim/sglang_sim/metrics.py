"""Counters, histograms and the Prometheus text exposition with SGLang's `sglang:` metric names."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0)
E2E_BUCKETS = (
    0.1,
    0.2,
    0.4,
    0.6,
    0.8,
    1.0,
    2.0,
    4.0,
    6.0,
    8.0,
    10.0,
    20.0,
    40.0,
    60.0,
    80.0,
    100.0,
    200.0,
    400.0,
    600.0,
    1200.0,
    1800.0,
    2400.0,
)
QUEUE_BUCKETS = (
    0.0,
    0.1,
    0.2,
    0.5,
    1.0,
    2.0,
    3.0,
    4.0,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    70.0,
    80.0,
    90.0,
    100.0,
    200.0,
    300.0,
    400.0,
    500.0,
    600.0,
    700.0,
    800.0,
    900.0,
    1000.0,
    1200.0,
    1400.0,
    1600.0,
    1800.0,
    2000.0,
    2500.0,
)

# SGLang 0.5.23's default_bucket_prompt_tokens (observability/metrics_collector.py).
PROMPT_TOKENS_BUCKETS = (
    100,
    300,
    500,
    700,
    1000,
    1500,
    2000,
    3000,
    4000,
    5000,
    6000,
    7000,
    8000,
    9000,
    10000,
    12500,
    15000,
    17500,
    20000,
    22500,
    25000,
    27500,
    30000,
    35000,
    40000,
    60000,
    80000,
    100000,
    200000,
    300000,
    400000,
    600000,
    800000,
    1000000,
    1100000,
)


# SGLang 0.5.23's bucket_inter_token_latency (observability/metrics_collector.py).
ITL_BUCKETS = (
    0.002,
    0.004,
    0.006,
    0.008,
    0.010,
    0.015,
    0.020,
    0.025,
    0.030,
    0.035,
    0.040,
    0.060,
    0.080,
    0.100,
    0.200,
    0.400,
    0.600,
    0.800,
    1.000,
    2.000,
    4.000,
    6.000,
    8.000,
)


class Histogram:
    def __init__(self, buckets: Sequence[float]) -> None:
        self.buckets = tuple(buckets)
        self.counts = [0] * len(self.buckets)
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        index = bisect.bisect_left(self.buckets, value)
        if index < len(self.counts):
            self.counts[index] += 1
        self.count += 1
        self.sum += value

    def observe_many(self, interval: float, tokens: int) -> None:
        """`tokens` gaps of interval / tokens each, as SGLang observes several tokens that came at once."""
        if tokens <= 0:
            return
        index = bisect.bisect_left(self.buckets, interval / tokens)
        if index < len(self.counts):
            self.counts[index] += tokens
        self.count += tokens
        self.sum += interval

    def cumulative(self) -> list[tuple[str, int]]:
        out, running = [], 0
        for bound, n in zip(self.buckets, self.counts, strict=True):
            running += n
            out.append((_num(bound), running))
        out.append(("+Inf", self.count))
        return out


@dataclass
class RequestStats:
    """Per-request counters, kept apart for streaming and non-streaming requests (label is_streaming)."""

    requests: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    e2e: Histogram = field(default_factory=lambda: Histogram(E2E_BUCKETS))


@dataclass
class Stats:
    """Counters of one server (all DP ranks)."""

    aborted: int = 0
    retracted: int = 0
    bootstrap_failed: int = 0
    queue_time: Histogram = field(default_factory=lambda: Histogram(QUEUE_BUCKETS))
    itl: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS))  # per generated token after the first
    prompt_len: Histogram = field(default_factory=lambda: Histogram(PROMPT_TOKENS_BUCKETS))  # finished requests
    streaming: RequestStats = field(default_factory=RequestStats)
    non_streaming: RequestStats = field(default_factory=RequestStats)

    def of(self, stream: bool) -> RequestStats:
        return self.streaming if stream else self.non_streaming


def _num(value: float) -> str:
    if isinstance(value, bool):
        return "1.0" if value else "0.0"
    return repr(float(value))


def _labels(labels: dict[str, str]) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return "{" + inner + "}"


class Exposition:
    """Builds a Prometheus text page; each family is declared once with HELP and TYPE."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, doc: str, samples: Iterable[tuple[dict[str, str], float]]) -> None:
        self.lines.append(f"# HELP {name} {doc}")
        self.lines.append(f"# TYPE {name} {kind}")
        sample_name = f"{name}_total" if kind == "counter" and not name.endswith("_total") else name
        for labels, value in samples:
            self.lines.append(f"{sample_name}{_labels(labels)} {_num(value)}")

    def histogram(self, name: str, doc: str, series: Iterable[tuple[dict[str, str], Histogram]]) -> None:
        self.lines.append(f"# HELP {name} {doc}")
        self.lines.append(f"# TYPE {name} histogram")
        for labels, hist in series:
            for bound, count in hist.cumulative():
                self.lines.append(f"{name}_bucket{_labels({**labels, 'le': bound})} {_num(count)}")
            self.lines.append(f"{name}_count{_labels(labels)} {_num(hist.count)}")
            self.lines.append(f"{name}_sum{_labels(labels)} {_num(hist.sum)}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"
