"""predict() of plugin_utils/sglang_perf.py pinned whole on small shapes worked out by hand, one case per term that
decides it: Poisson arrivals at and below the prefill capacity, a closed loop spread over two prefill and two decode
engines, a transfer-bound loop, a loop bound by one-prompt passes with calls queued at the router, the router's queue
limit and queue timeout, chunked prompts with bf16 index keys, and the recording and table rounds of predict_many.

Step source (Steps): a prefill pass is `prefill_ms` a prompt of the pass plus `per_cached` ms a cached prefix token
(that part is attention); a decode step is `decode_ms` plus `per_context` ms a context token (that part is
attention). All of it is measured. Expected values are derived by hand in the comment beside each case."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_perf as perf
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf import (
    BAND_CITATION,
    DecodeQuery,
    Figure,
    FleetShape,
    Prediction,
    PrefillQuery,
    StepTime,
    Term,
    Workload,
)

VERSION = (
    "step data measured with SGLang 0.5.14; this fleet runs SGLang 0.5.23, whose kernels may differ (not corrected)"
)


class Steps:
    """Round step times (see the module docstring); writes down every query."""

    def __init__(
        self,
        prefill_ms: float = 1000.0,
        decode_ms: float = 10.0,
        per_cached: float = 0.0,
        per_context: float = 0.0,
        version: str = "0.5.14",
    ) -> None:
        self.prefill_ms, self.decode_ms, self.per_cached, self.per_context = (
            prefill_ms,
            decode_ms,
            per_cached,
            per_context,
        )
        self.version = version
        self.prefills: list[PrefillQuery] = []
        self.decodes: list[DecodeQuery] = []

    def prefill(self, queries: Sequence[PrefillQuery]) -> list[StepTime]:
        self.prefills += queries
        out = []
        for q in queries:
            ms = self.prefill_ms * q.batch + self.per_cached * q.prefix
            out.append(StepTime(ms, ms, 0.0, 0.0, self.per_cached * q.prefix, "stub", self.version))
        return out

    def decode(self, queries: Sequence[DecodeQuery]) -> list[StepTime]:
        self.decodes += queries
        out = []
        for q in queries:
            ms = self.decode_ms + self.per_context * q.context
            out.append(StepTime(ms, ms, 0.0, 0.0, self.per_context * q.context, "stub", self.version))
        return out


def flat(p: Prediction) -> tuple[object, ...]:
    """Every field of a prediction, figures and terms included, as one flat tuple (for pytest.approx)."""
    out: list[object] = []
    for f in (p.ttft_p50, p.ttft_p90, p.itl_p50, p.itl_p90, p.itl_full, p.ttft_steady):
        out += [f.ms, f.estimated_ms, f.mape, f.source]
    out += [p.binding, p.decode_batch, p.calls_per_s, p.rejected, len(p.terms), len(p.notes)]
    for t in p.terms:
        out += [t.name, t.ms, t.source]
    out += p.notes
    return tuple(out)


def expected(
    *,
    ttft: tuple[float, float, float],
    ttft_share: float,
    xfer: float,
    ttft_ours: str,
    itl: tuple[float, float, float],
    itl_aic: tuple[float, float, float],
    batch: float,
    p90_batch: int,
    full_batch: int,
    binding: str,
    calls_per_s: float,
    terms: tuple[float, float, float, float],
    bf16: bool = False,
    notes: Sequence[str] = (),
    rejected: int = 0,
    version: str = VERSION,
) -> Prediction:
    """A Prediction from hand values: TTFT (p50, p90, steady), whose estimated part is (ms - transfer) x ttft_share;
    ITL (p50, p90, full) and their estimated parts; terms (prefill pass, its bf16 term, decode step, its bf16 term)."""
    ttft_src = f"stub (100% measured); our model: {ttft_ours}"
    keys = ", bf16 index keys" if bf16 else ""
    itl_src = f"stub (100% measured); our model: decode batch {batch:.1f}{keys}"

    def t(ms: float) -> Figure:
        return Figure(ms, max(0.0, ms - xfer) * ttft_share, 0.51, ttft_src)

    return Prediction(
        ttft_p50=t(ttft[0]),
        ttft_p90=t(ttft[1]),
        itl_p50=Figure(itl[0], itl_aic[0], 0.31, itl_src),
        itl_p90=Figure(
            itl[1], itl_aic[1], 0.31, f"stub (100% measured); our model: decode p90 batch {p90_batch}{keys}"
        ),
        itl_full=Figure(itl[2], itl_aic[2], 0.31, f"stub (100% measured); our model: decode batch {full_batch}{keys}"),
        ttft_steady=t(ttft[2]),
        binding=binding,
        decode_batch=batch,
        calls_per_s=calls_per_s,
        terms=[
            Term("prefill of one prompt", terms[0], "stub (100% measured)"),
            Term("bf16 index keys, prefill", terms[1], "our model"),
            Term("KV transfer", xfer, "our model (mooncake, declared bandwidth)"),
            Term("decode step at the steady batch", terms[2], "stub (100% measured)"),
            Term("bf16 index keys, decode step", terms[3], "our model"),
        ],
        notes=[BAND_CITATION, version, *notes],
        rejected=rejected,
    )


def same(found: Prediction, want: Prediction) -> None:
    """The words equal, the numbers equal to 1e-12 (the hand values are sums of decimal fractions)."""
    words, numbers = flat(want), flat(found)
    assert [x for x in numbers if isinstance(x, str)] == [x for x in words if isinstance(x, str)]
    assert [x for x in numbers if not isinstance(x, str)] == pytest.approx(
        [x for x in words if not isinstance(x, str)], rel=1e-12, abs=1e-12
    )


# ---------------------------------------------------------------- Poisson arrivals


def test_arrivals_exactly_at_the_prefill_capacity_bind_it_and_wait_unbounded() -> None:
    # 1 prefill, 1 decode engine of 4 running: 4 admitted, 4 prompts of 1,000 tokens a pass (8,192 // 1,000 = 8 > 4):
    # a pass of 4,000 ms serves 1 call/s, exactly the arrival rate: rho = 1, the wait is unbounded, the prefill engine
    # binds (its capacity equals the demand). Decode: 10 ms a step; the batch is 1 call/s x 100 x 10 ms = 1, reached
    # from 4 by halving the gap (3, 1.5, ...) until it is under 1e-6: 3 / 2**22. The p90 batch ceil(1 + 1.2816) = 3.
    # The step data carries no version: "?".
    fleet = FleetShape("m", decode_max_running=4)
    found = perf.predict(fleet, Workload(1000, 100, rate_per_s=1.0), Steps(version=""))
    want = expected(
        ttft=(math.inf, math.inf, math.inf),
        ttft_share=1.0,
        xfer=0.0,
        ttft_ours="queueing",
        itl=(10.0, 10.0, 10.0),
        itl_aic=(10.0, 10.0, 10.0),
        batch=1 + 3 / 2**22,
        p90_batch=3,
        full_batch=4,
        binding="prefill engine",
        calls_per_s=1.0,
        terms=(4000.0, 0.0, 10.0, 0.0),
        version=VERSION.replace("0.5.14", "?"),
    )
    same(found, want)
    assert found.decode_batch == 1 + 3 / 2**22
    assert found.ttft_p50.text() == "unbounded (the stage is over capacity)"


def test_arrivals_below_capacity_on_two_prefill_and_two_decode_engines() -> None:
    # 2 x 2 engines of 16 running: 32 admitted, 16 a decode engine, 16 waiting a prefill engine, 8 prompts a pass of
    # 8,000 ms: a service of 1,000 ms a call. The KV transfer: 1,000 tokens x 1,000 bytes at 10 MB/s = 100 ms.
    # 1.5 calls/s over 2 prefill engines: 0.75 a ms-second each, rho = 0.75. M/D/1 mean wait 0.75 x 1,000 /
    # (2 x 0.25) = 1,500 ms; its p50 1,500 / 0.75 x ln(0.75 / 0.5) = 2,000 ln 1.5, p90 2,000 ln 7.5.
    # Decode: 4 + context / 200 ms: 10 ms at the p50 context 1,200, 10.8 ms at the p90 context 1,360 (growth 1.08).
    # Batch: 0.0015 calls/ms x 400 x 10 ms / 2 engines = 3, from 16 by halving the gap of 13 under 1e-6: 13 / 2**24.
    # p90 batch ceil(3 + 1.2816 x sqrt(3)) = ceil(5.22) = 6. Capacities 2 x 8 / 8,000 (prefill), 2 / 100 (transfer),
    # 2 x 16 / (400 x 10) (decode): all above 0.0015, nothing binds.
    fleet = FleetShape(
        "m",
        prefill_engines=2,
        decode_engines=2,
        decode_max_running=16,
        kv_bytes_per_token=1000.0,
        transfer_bytes_per_s=1e7,
    )
    steps = Steps(decode_ms=4.0, per_context=1 / 200)
    found = perf.predict(fleet, Workload(1000, 400, rate_per_s=1.5), steps)
    want = expected(
        ttft=(8100.0 + 2000 * math.log(1.5), 8100.0 + 2000 * math.log(7.5), 9600.0),
        ttft_share=1.0,
        xfer=100.0,
        ttft_ours="queueing, transfer",
        itl=(10.0, 10.8, 10.8),
        itl_aic=(10.0, 10.8, 10.8),
        batch=3 + 13 / 2**24,
        p90_batch=6,
        full_batch=16,
        binding="none",
        calls_per_s=1.5,
        terms=(8000.0, 0.0, 10.0, 0.0),
    )
    same(found, want)
    # one prefill pass of 8 prompts; the ladder 1, 4, 16 at the p50 context and 16 at the p90 context
    assert steps.prefills == [PrefillQuery("m", 4, 4, 1000, 0, 8)]
    assert steps.decodes == [DecodeQuery("m", 4, 4, c, b) for c, b in [(1200, 1), (1200, 4), (1200, 16), (1360, 16)]]


# ---------------------------------------------------------------- closed loops


def test_a_closed_loop_over_two_prefill_and_two_decode_engines() -> None:
    # 8 calls over 2 x 2 engines: 4 a decode engine, 4 waiting a prefill engine, one pass of 4 prompts (4,000 ms);
    # transfer 1,000 tokens x 1,000 bytes at 1 MB/s = 1,000 ms. The loop: 8 / (4,000 + 1,000 + 100 x 10) = 1/750 a ms
    # (1.333 calls/s), under every capacity (prefill 2 x 4 / 4,000, transfer 2 / 1,000, decode 2 x 4 / 1,000): none
    # binds. Each pass hands 4 / 2 = 2 calls to a decode engine together: the batch is at least 2 (Little's law gives
    # 1/750 x 1,000 / 2 = 0.67), reached from 4 at a gap 2 / 2**21. A call decodes for 1,000 ms, a pass every 2,000
    # ms per engine: one group at a time, p90 batch 2. The burst: all 8 finish prefill at 4,000 and land at 5,000;
    # steady: the cycle 8 x 750 = 6,000 less 1,000 of decode.
    fleet = FleetShape("m", prefill_engines=2, decode_engines=2, kv_bytes_per_token=1000.0, transfer_bytes_per_s=1e6)
    found = perf.predict(fleet, Workload(1000, 100, concurrency=8), Steps())
    want = expected(
        ttft=(5000.0, 5000.0, 5000.0),
        ttft_share=1.0,
        xfer=1000.0,
        ttft_ours="queueing, transfer",
        itl=(10.0, 10.0, 10.0),
        itl_aic=(10.0, 10.0, 10.0),
        batch=2 + 2 / 2**21,
        p90_batch=2,
        full_batch=4,
        binding="none",
        calls_per_s=8 / 6,
        terms=(4000.0, 0.0, 10.0, 0.0),
    )
    same(found, want)


def test_a_closed_loop_bound_by_the_transfer() -> None:
    # 4 calls, one pass of 4 (4,000 ms), transfer 1,000 x 2,000 bytes at 1 MB/s = 2,000 ms: the transfer moves 1 call
    # in 2,000 ms, under the loop's 4 / (4,000 + 2,000 + 1,000) and the other stages (1/1,000, 4/1,000): it binds at
    # 0.5 calls/s. The pass hands all 4 calls to the decode engine: batch 4 from the start. Burst: all 4 at 6,000;
    # steady: the cycle 8,000 less 1,000 of decode.
    fleet = FleetShape("m", kv_bytes_per_token=2000.0, transfer_bytes_per_s=1e6)
    found = perf.predict(fleet, Workload(1000, 100, concurrency=4), Steps())
    want = expected(
        ttft=(6000.0, 6000.0, 7000.0),
        ttft_share=1.0,
        xfer=2000.0,
        ttft_ours="queueing, transfer",
        itl=(10.0, 10.0, 10.0),
        itl_aic=(10.0, 10.0, 10.0),
        batch=4.0,
        p90_batch=4,
        full_batch=4,
        binding="transfer",
        calls_per_s=0.5,
        terms=(4000.0, 0.0, 10.0, 0.0),
    )
    same(found, want)


def test_a_closed_loop_bound_by_the_decode_engine() -> None:
    # 8 calls on a decode engine of 2 running; prefill 100 ms a prompt, all 8 in one pass of 800 ms. The decode
    # engine finishes 2 calls every 100 x 10 ms: 2 calls/s, under the loop's 8 / (800 + 1,000) and the prefill
    # engine's 8 / 800: it binds. The pass hands 8 calls over, more than 2 run: batch 2, p90 batch 2.
    # Burst: all 8 done at 800. Steady: the cycle 8 / 0.002 = 4,000 less 1,000 of decode.
    fleet = FleetShape("m", decode_max_running=2)
    found = perf.predict(fleet, Workload(1000, 100, concurrency=8), Steps(prefill_ms=100.0))
    want = expected(
        ttft=(800.0, 800.0, 3000.0),
        ttft_share=1.0,
        xfer=0.0,
        ttft_ours="queueing",
        itl=(10.0, 10.0, 10.0),
        itl_aic=(10.0, 10.0, 10.0),
        batch=2.0,
        p90_batch=2,
        full_batch=2,
        binding="decode engine",
        calls_per_s=2.0,
        terms=(800.0, 0.0, 10.0, 0.0),
    )
    same(found, want)


def test_a_transfer_of_one_millisecond_still_binds() -> None:
    # the same loop at 1/2,000 the times: passes of 0.5 ms a prompt, 0.005 ms a decode step, a transfer of 1 ms
    fleet = FleetShape("m", kv_bytes_per_token=1000.0, transfer_bytes_per_s=1e9)
    found = perf.predict(fleet, Workload(1000, 100, concurrency=4), Steps(prefill_ms=0.5, decode_ms=0.005))
    assert (found.binding, found.terms[2].ms, found.calls_per_s) == ("transfer", 1.0, 1000.0)


def one_prompt_passes(transfer: float = 1e6, **router: float) -> FleetShape:
    # prompts of 5,000 tokens: 8,192 // 5,000 = 1 a pass
    return FleetShape("m", kv_bytes_per_token=20.0, transfer_bytes_per_s=transfer, **router)  # type: ignore[arg-type]


def test_one_prompt_passes_bind_the_prefill_engine_with_a_call_queued_at_the_router() -> None:
    # 4 calls, the router admits 3 and queues 1 (its queue holds 1: nobody is refused). One prompt a pass of 1,000
    # ms; transfer 5,000 x 20 bytes at 1 MB/s = 100 ms. The prefill engine serves 1 call/s, under the loop's
    # 3 / (1,000 + 100 + 1,000): it binds (the router's queue does not change that). Batch: 1 call/ms-s x 100 x 10
    # = 1, from 3 at a gap 2 / 2**21. A call decodes 1,000 ms, a pass lands every 1,000 ms: one at a time, p90
    # batch 1. The router queue: 1 call / (1/1,000) = 1,000 ms.
    # Burst: prefill done at 1,000, 2,000, 3,000, landed 100 ms later; the queued call enters when the first ends
    # (1,100 + 1,000 = 2,100) and waits for the engine free at 3,000: done 4,000, landed 4,100.
    # p50 of 1,100 .. 4,100: 2,600; p90: 3,100 + 0.7 x 1,000 = 3,800. Steady: max(1,100, 3,000 - 1,000) + 1,000.
    fleet = one_prompt_passes(router_max_concurrent=3, router_queue_size=1)
    found = perf.predict(fleet, Workload(5000, 100, concurrency=4), Steps())
    want = expected(
        ttft=(2600.0, 3800.0, 3000.0),
        ttft_share=1.0,
        xfer=100.0,
        ttft_ours="queueing, transfer",
        itl=(10.0, 10.0, 10.0),
        itl_aic=(10.0, 10.0, 10.0),
        batch=1 + 2 / 2**21,
        p90_batch=1,
        full_batch=3,
        binding="prefill engine",
        calls_per_s=1.0,
        terms=(1000.0, 0.0, 10.0, 0.0),
    )
    same(found, want)


def test_the_p90_batch_when_a_decode_lasts_exactly_one_pass_and_when_a_pass_is_a_millisecond() -> None:
    # the loop above at 1/1,000 the times: a decode of 100 x 0.01 ms lasts exactly one pass of 1 ms: one call
    # decoding at a time (p90 batch 1), not two
    fleet = one_prompt_passes(router_max_concurrent=3, router_queue_size=1)
    fast = Steps(prefill_ms=1.0, decode_ms=0.01)
    found = perf.predict(fleet, Workload(5000, 100, concurrency=4), fast)
    assert found.itl_p90.source == "stub (100% measured); our model: decode p90 batch 1"
    assert found.itl_full.source == "stub (100% measured); our model: decode batch 3"


def test_calls_over_the_router_queue_are_refused_and_queued_ones_time_out() -> None:
    # 5 calls, 2 admitted, 3 queued at a router whose queue holds 1: 2 refused (HTTP 429). 2 prompts of 1,000 tokens a
    # pass of 2,000 ms; the loop 2 / (2,000 + 1,000) = 1/1,500 calls a ms, under prefill (2 / 2,000) and decode
    # (2 / 1,000); the router binds. Batch 2 (the group of a pass). The queued call waits 1 x 1,500 ms, past the
    # 1.4999 s timeout; in the burst it is released at 2,000 + 1,000 = 3,000 ms, past 1,499.9: refused too.
    # Burst: both admitted calls at 2,000. Steady: max(2,000, 3,000 - 1,000) + 1,500 = 3,500.
    fleet = FleetShape("m", router_max_concurrent=2, router_queue_size=1, router_queue_timeout_s=1.4999)
    found = perf.predict(fleet, Workload(1000, 100, concurrency=5), Steps())
    want = expected(
        ttft=(2000.0, 2000.0, 3500.0),
        ttft_share=1.0,
        xfer=0.0,
        ttft_ours="queueing",
        itl=(10.0, 10.0, 10.0),
        itl_aic=(10.0, 10.0, 10.0),
        batch=2.0,
        p90_batch=2,
        full_batch=2,
        binding="router admission",
        calls_per_s=2 / 3,
        terms=(2000.0, 0.0, 10.0, 0.0),
        notes=[
            "2 of 5 calls find the router queue full (HTTP 429)",
            "the router queue wait (2 s) exceeds queue_timeout_secs (1.4999): queued calls time out",
            "1 queued calls wait past queue_timeout_secs and are refused; TTFT counts the rest",
        ],
        rejected=3,
    )
    same(found, want)


def timeouts(timeout_s: float) -> Prediction:
    # 9 calls, 3 admitted, 6 queued (no queue limit); one prompt a pass of 1,000 ms, no transfer
    fleet = one_prompt_passes(router_max_concurrent=3, router_queue_timeout_s=timeout_s, transfer=math.inf)
    return perf.predict(fleet, Workload(5000, 100, concurrency=9), Steps())


def test_queued_calls_released_after_the_timeout_are_refused_the_others_queue_for_the_engine() -> None:
    # Prefill done (and landed) at 1,000, 2,000, 3,000; each queued call is released when an earlier call ends,
    # 1,000 ms of decode later, in turn: 2,000, 3,000, 4,000, 2,000, 3,000, 4,000. A 3 s timeout refuses those
    # released at 4,000 (3,000 is not past it): 2 refused. The other 4 queue for the engine: done at 4,000, 5,000,
    # 6,000, 7,000. p50 of 1,000 .. 7,000 (7 calls): 4,000; p90: 6,000 + 0.4 x 1,000.
    # The router queue: 6 calls / (1/1,000) = 6,000 ms, past 3 s. The prefill engine binds (1 call/s under the loop's
    # 3 / 2,000). Steady: max(1,000, 3,000 - 1,000) + 6,000.
    want = expected(
        ttft=(4000.0, 6400.0, 8000.0),
        ttft_share=1.0,
        xfer=0.0,
        ttft_ours="queueing",
        itl=(10.0, 10.0, 10.0),
        itl_aic=(10.0, 10.0, 10.0),
        batch=1 + 2 / 2**21,
        p90_batch=1,
        full_batch=3,
        binding="prefill engine",
        calls_per_s=1.0,
        terms=(1000.0, 0.0, 10.0, 0.0),
        notes=[
            "the router queue wait (6 s) exceeds queue_timeout_secs (3): queued calls time out",
            "2 queued calls wait past queue_timeout_secs and are refused; TTFT counts the rest",
        ],
        rejected=2,
    )
    same(timeouts(3.0), want)


def test_the_queue_timeout_is_in_seconds_and_strict() -> None:
    # 3.999 s: still only the calls released at 4,000 ms time out
    assert (timeouts(3.999).rejected, timeouts(3.999).ttft_p90.ms) == (2, 6400.0)
    # 6 s: the router queue's 6,000 ms is not past it, no call is released after it
    six = timeouts(6.0)
    assert (six.notes, six.rejected) == ([BAND_CITATION, VERSION], 0)
    # 4 s: no call is refused; the 6 queue for the engine, done 4,000 .. 9,000
    four = timeouts(4.0)
    assert (four.rejected, four.ttft_p50.ms, four.ttft_p90.ms) == (0, 5000.0, 8200.0)


# ---------------------------------------------------------------- chunks and bf16 index keys


def test_chunked_prompts_with_bf16_index_keys() -> None:
    # 1,000 tokens in chunks of 500: the first (1,000 ms), the second on 500 cached tokens (1,000 + 500 ms, of it 500
    # attention); its reference without prefix has none. bf16 keys (index share 0.5, 3 times as wide): the growth x
    # 0.5 x 2 = 500 ms. A pass 2,500 ms measured + 500 ours: the measured share 5/6. Long prompts: one a pass.
    # Decode: 10 + context / 100 ms, of it context / 100 attention; the reference at a page (256) has 2.56. The p50
    # context 1,000 + 101 // 2 = 1,050: 20.5 ms + 7.94 of bf16 keys = 28.44 at every batch; the p90 context
    # 1,000 + 909 // 10 = 1,090: 20.9 + 8.34 = 29.24.
    # 2 calls: the prefill engine serves 1 in 3,000 ms, under the loop's 2 / (3,000 + 101 x 28.44): it binds.
    # Batch: 1/3,000 x 101 x 28.44 = 0.96, at least 1: from 2 at a gap 1 / 2**20. A decode of 2,872 ms spans one
    # pass of 3,000: p90 batch 1, its step 28.44 grown to the p90 context (x 29.24 / 28.44).
    # Burst: prefill done at 3,000 and 6,000: p50 4,500, p90 5,700; steady max(3,000, 6,000 - 101 x 28.44).
    fleet = FleetShape("m", chunked_prefill_size=500, index_share=0.5, key_ratio=3.0)
    steps = Steps(per_cached=1.0, per_context=0.01)
    found = perf.predict(fleet, Workload(1000, 101, concurrency=2), steps)
    want = expected(
        ttft=(4500.0, 5700.0, 6000.0 - 101 * 28.44),
        ttft_share=2500 / 3000,
        xfer=0.0,
        ttft_ours="2 chunks, queueing, bf16 index keys",
        itl=(28.44, 29.24, 29.24),
        itl_aic=(20.5, 20.5 * 29.24 / 28.44, 20.9),
        batch=1 + 1 / 2**20,
        p90_batch=1,
        full_batch=2,
        binding="prefill engine",
        calls_per_s=1 / 3,
        terms=(2500.0, 500.0, 20.5, 7.94),
        bf16=True,
    )
    same(found, want)
    assert steps.prefills == [
        PrefillQuery("m", 4, 4, 500, 0, 1),
        PrefillQuery("m", 4, 4, 1000, 500, 1),
        PrefillQuery("m", 4, 4, 500, 0, 1),
        PrefillQuery("m", 4, 4, 500, 0, 1),
    ]
    points = [(1050, 1), (1050, 2), (1090, 2), (256, 1), (256, 2), (256, 2)]
    assert steps.decodes == [DecodeQuery("m", 4, 4, c, b) for c, b in points]


# ---------------------------------------------------------------- predict_many's rounds


def test_the_recording_round_answers_one_measured_millisecond() -> None:
    recorder = perf._Recorder()
    p, d = PrefillQuery("m", 4, 4, 10, 0, 1), DecodeQuery("m", 4, 4, 10, 1)
    one = StepTime(1.0, 1.0, 0.0, 0.0, 0.0, "recorder")
    assert recorder.prefill([p, p]) == [one, one]
    assert recorder.decode([d]) == [one]
    assert (recorder.prefills, recorder.decodes) == ([p, p], [d])


class Extra:
    """A batched source that answers one step more than asked on one side."""

    def __init__(self, side: str) -> None:
        self.side = side

    def both(
        self, prefills: Sequence[PrefillQuery], decodes: Sequence[DecodeQuery]
    ) -> tuple[list[StepTime], list[StepTime]]:
        steps = Steps()
        p, d = steps.prefill(prefills), steps.decode(decodes)
        return (p + p[:1], d) if self.side == "prefill" else (p, d + d[:1])


@pytest.mark.parametrize("side", ["prefill", "decode"])
def test_predict_many_refuses_a_source_that_answers_more_steps_than_asked(side: str) -> None:
    with pytest.raises(ValueError, match="zip"):
        perf.predict_many([(FleetShape("m"), Workload(1000, 100, concurrency=1))], Extra(side))
