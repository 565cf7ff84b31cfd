"""The time model's building blocks (plugin_utils/sglang_perf.py) on hand-made step sources: figures and their words,
the workload's two forms, the AIConfigurator ids, the index-key facts of the capacity model, the fleet shape's
defaults, one prefill pass (prefix, chunks, bf16 index-key term) and decode steps with the queries they ask, the source
strings, and a whole prediction of one call worked out by hand."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_perf as perf
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf import (
    DecodeQuery,
    Figure,
    FleetShape,
    OneRoundSteps,
    PassTime,
    Prediction,
    PrefillQuery,
    StepTime,
    Term,
    Workload,
)
from modeltools import load_model

DSV4 = load_model("deepseek-v4-flash")
V32 = load_model("deepseek-v3.2")


class Hand:
    """Prefill: batch x (isl - prefix) / 10 + prefix / 100 ms, of it attention prefix / 100 ms. Decode: batch +
    context / 100 ms, of it attention context / 100 ms. Writes down every round it is asked."""

    def __init__(self) -> None:
        self.prefills: list[list[PrefillQuery]] = []
        self.decodes: list[list[DecodeQuery]] = []

    def prefill(self, queries: Sequence[PrefillQuery]) -> list[StepTime]:
        self.prefills.append(list(queries))
        return [
            StepTime(q.batch * (q.isl - q.prefix) / 10 + q.prefix / 100, 0.0, 0.0, 0.0, q.prefix / 100, "hand", "9")
            for q in queries
        ]

    def decode(self, queries: Sequence[DecodeQuery]) -> list[StepTime]:
        self.decodes.append(list(queries))
        return [StepTime(q.batch + q.context / 100, 0.0, 0.0, 0.0, q.context / 100, "hand", "9") for q in queries]


# index-key bytes a token adds are half of what attention reads, and bf16 keys are 3 times as wide: the extra time is
# the attention growth x 0.5 x 2, the growth itself
BF16 = FleetShape("m", index_share=0.5, key_ratio=3.0)
FP8 = FleetShape("m")


# ---------------------------------------------------------------- figures


def test_a_figure_is_banded_by_its_estimated_part() -> None:
    figure = Figure(1500.0, 1000.0, 0.5, "src")
    assert (figure.low, figure.high) == (1000.0, 2000.0)
    assert figure.text() == "1.50 s (1.00-2.00, mean error; src)"
    assert figure.text("ms") == "1,500.00 ms (1,000.00-2,000.00, mean error; src)"
    assert Figure(math.inf, 0.0, 0.5, "src").text() == "unbounded (the stage is over capacity)"


def test_tokens_per_second_of_a_call() -> None:
    def prediction(itl_ms: float) -> Prediction:
        f = Figure(itl_ms, itl_ms, 0.31, "s")
        return Prediction(f, f, f, f, f, f, "none", 1.0, 1.0)

    assert prediction(20.0).tokens_per_s_per_call == 50.0
    assert prediction(0.5).tokens_per_s_per_call == 2000.0
    assert prediction(0.0).tokens_per_s_per_call == math.inf
    assert (prediction(1.0).terms, prediction(1.0).notes, prediction(1.0).rejected) == ([], [], 0)


@pytest.mark.parametrize("kwargs", [{}, {"concurrency": 1, "rate_per_s": 1.0}])
def test_a_workload_is_one_of_its_two_forms(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError) as caught:
        Workload(100, 10, **kwargs)  # type: ignore[arg-type]
    assert str(caught.value) == (
        "a workload is either concurrency=N (closed loop) or rate_per_s=R (arrivals), not both"
    )


def test_aic_model_ids() -> None:
    assert perf.aic_model("deepseek-v4-flash", "mxfp4") == "deepseek-ai/DeepSeek-V4-Flash"
    assert perf.aic_model("deepseek-v4-flash", "fp8") == "sgl-project/DeepSeek-V4-Flash-FP8"
    assert perf.aic_model("deepseek-v3.2", "fp8") == "deepseek-ai/DeepSeek-V3.2"
    with pytest.raises(ValueError) as caught:
        perf.aic_model("deepseek-v3.2", "mxfp4")
    assert str(caught.value) == (
        "no AIConfigurator model for deepseek-v3.2 (mxfp4); known: [('deepseek-v3.2', 'fp8'), "
        "('deepseek-v4-flash', 'fp8'), ('deepseek-v4-flash', 'mxfp4')]"
    )
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_index_facts_of_the_capacity_model() -> None:
    # V4-Flash: 21 c4 layers add a quarter fp8 key of 128 + 4 bytes each (693 bytes a token), 20 c128 layers 1/128 of
    # a padded page slot (1,728 bytes for 2 slots of 584: 135 bytes a token); bf16 keys are 256 bytes wide
    assert perf.index_facts(DSV4, True) == (693 / 828, 256 / 132)
    assert perf.index_facts(DSV4, False) == (693 / 828, 1.0)
    assert perf.index_facts(V32, True) == (0.0, 1.0)


def test_fleet_shape_defaults_and_choices() -> None:
    shape = perf.fleet_shape(V32, "x")
    assert (shape.model, shape.prefill_engines, shape.decode_engines) == ("x", 1, 1)
    assert (shape.prefill_tp, shape.decode_tp, shape.prefill_ep, shape.decode_ep) == (4, 4, 4, 4)
    assert (shape.chunked_prefill_size, shape.decode_max_running) == (8192, 64)
    assert (shape.transfer_backend, shape.transfer_bytes_per_s) == ("mooncake", 20e9)
    assert (shape.index_share, shape.key_ratio) == (0.0, 1.0)
    assert (shape.router_max_concurrent, shape.router_queue_size, shape.router_queue_timeout_s) == (None, None, None)
    assert shape.kv_bytes_per_token > 0
    other = perf.fleet_shape(
        DSV4,
        "y",
        prefill_engines=2,
        decode_engines=3,
        tp=8,
        decode_tp=2,
        chunked_prefill_size=4096,
        decode_max_running=16,
        bf16_index_k=False,
        transfer_backend="mooncake_tcp",
        router_max_concurrent=5,
        router_queue_size=6,
        router_queue_timeout_s=7.0,
    )
    assert (other.prefill_engines, other.decode_engines, other.chunked_prefill_size, other.decode_max_running) == (
        2,
        3,
        4096,
        16,
    )
    assert (other.prefill_tp, other.decode_tp, other.prefill_ep, other.decode_ep) == (8, 2, 8, 2)
    assert (other.transfer_backend, other.transfer_bytes_per_s) == ("mooncake_tcp", 2.5e9)
    assert (other.index_share, other.key_ratio) == (693 / 828, 1.0)
    assert (other.router_max_concurrent, other.router_queue_size, other.router_queue_timeout_s) == (5, 6, 7.0)
    assert perf.fleet_shape(V32, "x", transfer_backend="tcpx").transfer_bytes_per_s == 20e9  # unknown: RDMA
    assert perf.fleet_shape(V32, "x", transfer_backend="fake").transfer_bytes_per_s == math.inf
    assert perf.fleet_shape(V32, "x", transfer_bytes_per_s=1e9, transfer_backend="fake").transfer_bytes_per_s == 1e9


def test_the_kv_bytes_per_token_are_per_gpu_at_the_prefill_tp() -> None:
    # V4-Flash keeps one copy of its compressed cache on every GPU: the bytes do not shrink with tp
    bf16 = perf.fleet_shape(DSV4, "x", tp=8).kv_bytes_per_token
    assert bf16 == perf.fleet_shape(DSV4, "x", tp=4).kv_bytes_per_token
    # a c4 page holds 64 slots of 584 bytes padded to 37,440 (585 a slot) and a key a slot: bf16 keys 21 x (585 + 256)
    # / 4 + 135 bytes, fp8 keys 21 x (585 + 132) / 4 + 135
    assert bf16 == 21 * (585 + 256) / 4 + 135
    assert perf.fleet_shape(DSV4, "x", bf16_index_k=False).kv_bytes_per_token == 21 * (585 + 132) / 4 + 135


# ---------------------------------------------------------------- the step sources


def test_one_round_steps_answer_each_side_from_one_round() -> None:
    class Round(OneRoundSteps):
        def __init__(self) -> None:
            self.asked: list[tuple[list[PrefillQuery], list[DecodeQuery]]] = []

        def both(
            self, prefills: Sequence[PrefillQuery], decodes: Sequence[DecodeQuery]
        ) -> tuple[list[StepTime], list[StepTime]]:
            self.asked.append((list(prefills), list(decodes)))
            return [StepTime(1.0, 1.0, 0, 0, 0, "p")] * len(prefills), [StepTime(2.0, 2.0, 0, 0, 0, "d")] * len(decodes)

    steps = Round()
    p, d = PrefillQuery("m", 1, 1, 10, 0, 1), DecodeQuery("m", 1, 1, 10, 1)
    assert [s.ms for s in steps.prefill([p, p])] == [1.0, 1.0]
    assert [s.ms for s in steps.decode([d])] == [2.0]
    assert steps.asked == [([p, p], []), ([], [d])]
    with pytest.raises(NotImplementedError):
        OneRoundSteps().prefill([p])


# ---------------------------------------------------------------- a prefill pass


def test_a_pass_on_a_cached_prefix_with_bf16_keys() -> None:
    steps = Hand()
    # 2 prompts of 1,000 tokens, 400 cached: 2 x 600 / 10 + 4 = 124 ms; the same pass without prefix (600 tokens)
    # has no attention growth, so bf16 keys add the 4 ms of growth
    found = perf.prefill_pass(BF16, 1000, 2, steps, prefix=400)
    step = StepTime(124.0, 0.0, 0.0, 0.0, 4.0, "hand", "9")
    assert found == PassTime(124.0, 4.0, [step], 1)
    assert found.ms == 128.0
    assert steps.prefills == [[PrefillQuery("m", 4, 4, 1000, 400, 2), PrefillQuery("m", 4, 4, 600, 0, 2)]]
    assert perf.prefill_pass_ms(BF16, 1000, 2, steps, prefix=400) == 128.0
    assert perf.prefill_pass_ms(BF16, 1000, 2, steps) == 200.0  # no prefix: no growth, no term


def test_a_pass_with_fp8_keys_asks_no_reference() -> None:
    steps = Hand()
    assert perf.prefill_pass(FP8, 1000, 2, steps, prefix=400) == PassTime(
        124.0, 0.0, [StepTime(124.0, 0.0, 0.0, 0.0, 4.0, "hand", "9")], 1
    )
    assert steps.prefills == [[PrefillQuery("m", 4, 4, 1000, 400, 2)]]


def test_a_pass_without_prefix_is_its_own_reference() -> None:
    steps = Hand()
    assert perf.prefill_pass(BF16, 100, 1, steps) == PassTime(
        10.0, 0.0, [StepTime(10.0, 0.0, 0.0, 0.0, 0.0, "hand", "9")], 1
    )
    assert steps.prefills == [[PrefillQuery("m", 4, 4, 100, 0, 1)] * 2]


def test_a_prompt_of_exactly_one_chunk_is_one_pass() -> None:
    steps = Hand()
    fleet = FleetShape("m", chunked_prefill_size=100)
    assert perf.prefill_pass(fleet, 150, 3, steps, prefix=50).chunks == 1
    assert steps.prefills == [[PrefillQuery("m", 4, 4, 150, 50, 3)]]


def test_a_long_prompt_is_its_chunks_one_after_another() -> None:
    steps = Hand()
    fleet = FleetShape("m", prefill_tp=8, prefill_ep=2, chunked_prefill_size=100, index_share=0.5, key_ratio=3.0)
    # 400 tokens past a 50-token prefix: chunks on 50, 150, 250, 350 cached, 10.5, 11.5, 12.5 and 13.5 ms, their
    # bf16 terms 0.5, 1.5, 2.5, 3.5; three such prompts one after another
    found = perf.prefill_pass(fleet, 450, 3, steps, prefix=50)
    assert (found.estimated_ms, found.ours_ms, found.chunks) == (3 * 48.0, 3 * 8.0, 4)
    assert [s.ms for s in found.steps] == [10.5, 11.5, 12.5, 13.5]
    chunks = [PrefillQuery("m", 8, 2, end, start, 1) for start, end in [(50, 150), (150, 250), (250, 350), (350, 450)]]
    assert steps.prefills == [chunks + [PrefillQuery("m", 8, 2, 100, 0, 1)] * 4]


def test_a_long_prompt_prices_five_chunks_and_interpolates_the_rest() -> None:
    steps = Hand()
    fleet = FleetShape("m", chunked_prefill_size=100)
    # 7 chunks of one 700-token prompt: chunks 0, 2, 3, 5 and the last priced (10 + k ms for chunk k); chunks 1 and 4
    # interpolated (11 and 14): 10 + 11 + ... + 16 = 91; two such prompts one after another
    found = perf.prefill_pass(fleet, 700, 2, steps)
    assert (found.estimated_ms, found.ours_ms, found.chunks) == (182.0, 0.0, 7)
    assert [q.prefix for q in steps.prefills[0]] == [0, 200, 300, 500, 600]


@pytest.mark.parametrize(
    ("isl", "batch", "prefix", "message"),
    [
        (0, 1, 0, "a prefill pass needs isl > 0 and batch > 0 (isl=0, batch=1)"),
        (10, 0, 0, "a prefill pass needs isl > 0 and batch > 0 (isl=10, batch=0)"),
        (10, 1, 10, "a prefill pass computes at least one token: 0 <= prefix < isl (prefix=10, isl=10)"),
        (10, 1, -1, "a prefill pass computes at least one token: 0 <= prefix < isl (prefix=-1, isl=10)"),
    ],
)
def test_not_a_prefill_pass(isl: int, batch: int, prefix: int, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        perf.prefill_pass(FP8, isl, batch, Hand(), prefix)
    assert str(caught.value) == message


# ---------------------------------------------------------------- decode steps and the transfer


def test_decode_steps_with_bf16_keys_against_one_page_of_context() -> None:
    steps = Hand()
    fleet = FleetShape("m", decode_tp=8, decode_ep=2, index_share=0.5, key_ratio=3.0)
    found = perf.decode_steps(fleet, [(1000, 2), (50, 1)], steps)
    # the attention growth over 256 tokens of context: 10 - 2.56 ms at 1,000 tokens, none below a page
    assert found == [
        (StepTime(12.0, 0.0, 0.0, 0.0, 10.0, "hand", "9"), pytest.approx(10.0 - 2.56)),
        (StepTime(1.5, 0.0, 0.0, 0.0, 0.5, "hand", "9"), 0.0),
    ]
    assert steps.decodes == [
        [
            DecodeQuery("m", 8, 2, 1000, 2),
            DecodeQuery("m", 8, 2, 50, 1),
            DecodeQuery("m", 8, 2, 256, 2),
            DecodeQuery("m", 8, 2, 256, 1),
        ]
    ]
    assert perf.decode_step_ms(fleet, 1000, 2, Hand()) == pytest.approx(12.0 + 10.0 - 2.56)


def test_decode_steps_with_fp8_keys_ask_no_reference() -> None:
    steps = Hand()
    assert perf.decode_steps(FP8, [(1000, 2)], steps) == [(StepTime(12.0, 0.0, 0.0, 0.0, 10.0, "hand", "9"), 0.0)]
    assert steps.decodes == [[DecodeQuery("m", 4, 4, 1000, 2)]]
    assert perf.decode_step_ms(FP8, 1000, 2, Hand()) == 12.0


def test_transfer_ms() -> None:
    fleet = FleetShape("m", kv_bytes_per_token=1000.0, transfer_bytes_per_s=1e6)
    assert perf.transfer_ms(fleet, 500) == 500.0  # 500,000 bytes at 1 MB/s
    assert perf.transfer_ms(FP8, 500) == 0.0  # declared unbounded


# ---------------------------------------------------------------- words


def test_the_source_of_step_times() -> None:
    mixed = [StepTime(10.0, 6.0, 1.0, 1.0, 0.0, "o"), StepTime(10.0, 4.0, 3.0, 3.0, 0.0, "x")]
    assert perf._source(mixed) == ("o", "50% measured, 30% extrapolated, 20% SOL")
    assert perf._source([StepTime(10.0, 10.0, 0.0, 0.0, 0.0, "o")]) == ("o", "100% measured")
    assert perf._source([StepTime(0.0, 0.0, 0.0, 0.0, 0.0, "o")]) == ("o", "0% measured, 100% extrapolated")
    assert perf._source([StepTime(100.0, 99.0, 0.0, 1.0, 0.0, "o")]) == ("o", "99% measured, 1% SOL")
    assert perf._source([StepTime(1000.0, 996.0, 4.0, 0.0, 0.0, "o")]) == ("o", "100% measured")
    assert perf._source([StepTime(100.0, 97.0, 3.0, 0.0, 0.0, "o")]) == ("o", "97% measured, 3% extrapolated")
    assert perf._source([StepTime(100.0, 97.0, 0.0, 3.0, 0.0, "o")]) == ("o", "97% measured, 3% SOL")


def test_what_our_model_adds_to_a_ttft() -> None:
    assert perf._ttft_ours(3, True, 5.0, 2, FP8) == "3 chunks, queueing, transfer, bf16 index keys"
    assert perf._ttft_ours(1, False, 0.0, 1, FP8) == "nothing"
    assert perf._ttft_ours(2, False, 0.0, 2, FleetShape("m", prefill_engines=2)) == "2 chunks"


# ---------------------------------------------------------------- a whole prediction


class Flat:
    """Every prefill pass 1,000 ms, every decode step 10 ms, all of it measured."""

    def __init__(self) -> None:
        self.rounds = 0

    def prefill(self, queries: Sequence[PrefillQuery]) -> list[StepTime]:
        return [StepTime(1000.0, 1000.0, 0.0, 0.0, 0.0, "flat", "0.5.14") for _q in queries]

    def decode(self, queries: Sequence[DecodeQuery]) -> list[StepTime]:
        return [StepTime(10.0, 10.0, 0.0, 0.0, 0.0, "flat", "0.5.14") for _q in queries]

    def both(
        self, prefills: Sequence[PrefillQuery], decodes: Sequence[DecodeQuery]
    ) -> tuple[list[StepTime], list[StepTime]]:
        self.rounds += 1
        return self.prefill(prefills), self.decode(decodes)


def one_call() -> Prediction:
    """One call of 1,000 tokens in, 100 out: a pass of 1,000 ms, no transfer, 100 steps of 10 ms; the loop's
    throughput 1 call in 2,000 ms, below both stages' 1 in 1,000."""
    ttft_src = "flat (100% measured); our model: nothing"
    itl_src = "flat (100% measured); our model: decode batch 1.0"
    return Prediction(
        ttft_p50=Figure(1000.0, 1000.0, 0.51, ttft_src),
        ttft_p90=Figure(1000.0, 1000.0, 0.51, ttft_src),
        itl_p50=Figure(10.0, 10.0, 0.31, itl_src),
        itl_p90=Figure(10.0, 10.0, 0.31, "flat (100% measured); our model: decode p90 batch 1"),
        itl_full=Figure(10.0, 10.0, 0.31, "flat (100% measured); our model: decode batch 1"),
        ttft_steady=Figure(1000.0, 1000.0, 0.51, ttft_src),
        binding="none",
        decode_batch=1.0,
        calls_per_s=0.5,
        terms=[
            Term("prefill of one prompt", 1000.0, "flat (100% measured)"),
            Term("bf16 index keys, prefill", 0.0, "our model"),
            Term("KV transfer", 0.0, "our model (mooncake, declared bandwidth)"),
            Term("decode step at the steady batch", 10.0, "flat (100% measured)"),
            Term("bf16 index keys, decode step", 0.0, "our model"),
        ],
        notes=[
            "AIConfigurator 0.12.0's published check against 759 measured single-node points: mean absolute "
            "percentage error 51 % on TTFT, 31 % on TPOT (ai-dynamo aisimulate, pull request 49)",
            "step data measured with SGLang 0.5.14; this fleet runs SGLang 0.5.23, whose kernels may differ (not "
            "corrected)",
        ],
        rejected=0,
    )


def test_the_prediction_of_one_call() -> None:
    assert perf.predict(FP8, Workload(1000, 100, concurrency=1), Flat()) == one_call()


def test_predict_many_asks_a_batched_source_once() -> None:
    source = Flat()
    cases = [(FP8, Workload(1000, 100, concurrency=1)), (FP8, Workload(1000, 100, concurrency=1))]
    assert perf.predict_many(cases, source) == [one_call(), one_call()]
    assert source.rounds == 1


def test_predict_many_asks_a_plain_source_each_side_once() -> None:
    source = Hand()
    (found,) = perf.predict_many([(FP8, Workload(1000, 100, concurrency=1))], source)
    assert (len(source.prefills), len(source.decodes)) == (1, 1)
    assert source.prefills[0] == [PrefillQuery("m", 4, 4, 1000, 0, 1)]
    # the p50 context 1,050 and the p90 context 1,090, each at batch 1
    assert source.decodes[0] == [DecodeQuery("m", 4, 4, 1050, 1), DecodeQuery("m", 4, 4, 1090, 1)]
    assert (found.ttft_p50.ms, found.itl_p50.ms, found.itl_full.ms) == (100.0, 11.5, pytest.approx(11.9))
