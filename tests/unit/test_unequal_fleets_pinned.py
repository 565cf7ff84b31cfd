"""The fleet answer, the planner, the risks and the time model on fleets whose engines differ (unequal_fleets.py).
Each expected figure is worked out by hand in the test's docstring; on these fleets a rule that takes the max for
the min, or any engine for every engine, or the first engine for the smallest, gives another figure."""

from __future__ import annotations

from typing import Any

import pytest
import unequal_fleets as uf
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_perf_fleet as perf
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_fleet import (
    CONTEXT,
    KV_POOL,
    PREFILL,
    RUNNING,
    Engine,
    answer,
)
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_plan import Shape, fleet_fit, plan, rollout_plan
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_report import (
    capacity_lines,
    fleet_lines,
    live_fleet_summary,
)
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_risks import declared_state, risks
from sglang_envelope_cli import commands as cli

# ---------------------------------------------------------------- the fleet answer


def test_one_prefill_pool_that_holds_a_call_is_enough() -> None:
    """p-big holds 10,000,000 // 200,192 = 49 calls (50 x 200,192 = 10,009,600 is over), p-small 100,000 // 200,192
    = 0. smg sends a call to a prefill engine that holds it, so the prefill pools bind only when none does: the
    decode pool's 100 calls bind. With both pools small, 0 calls (prefill)."""
    memory = uf.answer_of(uf.TWO_PREFILL_POOLS)
    assert [c.pool_fit_per_rank for c in memory.prefill] == [49, 0]
    assert (memory.parallel, memory.binding) == (100, KV_POOL)
    both_small = [uf.prefill("a", 100_000), uf.prefill("b", 100_000), uf.decode("d", 100 * uf.RESERVED_CALL)]
    assert (uf.answer_of(both_small).parallel, uf.answer_of(both_small).binding) == (0, PREFILL)


def test_unequal_decode_pools_are_summed_engine_by_engine() -> None:
    """d-big 100 x 200,704 // 200,704 = 100 calls, d-small 10; 256 slots each (512). The fleet runs 100 + 10 = 110,
    bound by the pools; the total context is 110 x 200,704 = 22,077,440 tokens."""
    memory = uf.answer_of(uf.UNEQUAL_DECODE_POOLS)
    assert [c.per_engine for c in memory.decode] == [100, 10]
    assert (memory.parallel, memory.decode_pool_fit, memory.decode_running) == (110, 110, 512)
    assert (memory.binding, memory.bindings, memory.total_context) == (KV_POOL, (KV_POOL,), 22_077_440)


def test_each_engine_runs_the_smaller_of_its_pool_and_its_slots() -> None:
    """d-slots: a pool of 100 calls, 8 slots -> 8 (its slots bind); d-pool: a pool of 5 calls, 256 slots -> 5 (its
    pool binds). The fleet runs 8 + 5 = 13, below both sums (pools 105, slots 264): the engines' own mix binds, and
    one engine bound by its pool names the pools."""
    memory = uf.answer_of(uf.MIXED_BINDINGS)
    slots, pool = memory.decode
    assert (slots.per_rank, slots.binding, pool.per_rank, pool.binding) == (8, "max_running_requests", 5, "kv_pool")
    assert (memory.decode_calls, memory.decode_pool_fit, memory.decode_running) == (13, 105, 264)
    assert (memory.parallel, memory.binding, memory.bindings) == (13, KV_POOL, (KV_POOL,))


def test_a_live_engine_reporting_a_reserve_of_zero_keeps_it() -> None:
    """/server_info says num_reserved_decode_tokens 0: the engine admits 100 x 200,192 // 200,192 = 100 calls; its
    neighbour keeps SGLang's 512 and admits 20,019,200 // 200,704 = 99 (100 x 200,704 = 20,070,400 is over). 199."""
    live = {"max_total_tokens": 100 * uf.PAGED_CALL, "max_running_requests": 256, "context_length": uf.CONTEXT,
            "page_size": uf.PAGE, "disaggregation_mode": "decode", "num_reserved_decode_tokens": 0}  # fmt: skip
    assert Engine.from_live("d-zero", "decode", live) == uf.ZERO_RESERVE[1]
    memory = uf.answer_of(uf.ZERO_RESERVE)
    assert [c.per_engine for c in memory.decode] == [100, 99]
    assert (memory.parallel, memory.binding) == (199, KV_POOL)


def test_ranks_count_per_engine() -> None:
    """d-dp4: 4 ranks, each a pool of 3 calls and 10 slots -> 3 per rank, 12 per engine (pool 12, slots 40); d-dp1:
    a pool of 20 calls, 16 slots -> 16. The fleet runs 12 + 16 = 28 (pools 12 + 20 = 32, slots 40 + 16 = 56), the
    pool of d-dp4 binding; the total context is (4 x 3 + 20) x 200,704 = 6,422,528 tokens."""
    memory = uf.answer_of(uf.UNEQUAL_RANKS)
    dp4, dp1 = memory.decode
    assert (dp4.per_rank, dp4.per_engine, dp4.pool_fit_per_engine, dp4.running_per_engine) == (3, 12, 12, 40)
    assert (dp1.per_engine, dp1.binding) == (16, "max_running_requests")
    assert (memory.parallel, memory.decode_pool_fit, memory.decode_running) == (28, 32, 56)
    assert (memory.binding, memory.total_context) == (KV_POOL, 6_422_528)


@pytest.mark.parametrize(
    ("tokens", "parallel", "binding"),
    [
        # 131,070 tokens: 512 pages = 131,072, + 512 = 131,584; 10^8 // 131,584 = 759 > 256 slots: 2 x 256.
        (None, 512, RUNNING),
        (131_070, 512, RUNNING),
        (131_071, 0, CONTEXT),  # over the shortest engine's 131,072 - 2, though the others serve it
    ],
)
def test_the_shortest_context_of_any_engine_serves_the_fleet(tokens: int | None, parallel: int, binding: str) -> None:
    """Contexts 131,072 (p-short), 524,288, 262,144 and 524,288: a call is served at most 131,072 - 2 = 131,070."""
    memory = answer(uf.UNEQUAL_CONTEXTS, [], tokens).memory
    assert (memory.per_call_context, memory.served_tokens) == (131_072, 131_070)
    assert (memory.tokens, memory.parallel, memory.binding) == (tokens or 131_070, parallel, binding)


def test_the_audit_report_answers_from_each_live_engine() -> None:
    """The live fleet (unequal_fleets.LIVE_FLEET). Per-call context = min(p-long 524,288, p-short 262,144, d-zero
    524,288, d-small 524,288) = 262,144; a call is served at most 262,142 tokens = 1,024 pages of 256 = 262,144.
    At that length d-zero (reserve 0) holds 11,159,040 // 262,144 = 42 (43 x 262,144 = 11,272,192 is over), below its
    64 slots; d-small (reserve 512) 2,000,000 // 262,656 = 7 (8 x 262,656 = 2,101,248 is over), below its 8 slots:
    42 + 7 = 49 at the full context, bound by the pools (running 64 + 8 = 72, routers 100 + 50 = 150). Short calls
    (1 token: 1 page, 256 + 0 and 256 + 512 tokens) fill both engines' slots: 72, bound by them. Total context =
    11,159,040 + 2,000,000 = 13,159,040 tokens. The routers queue 10 + 20 = 30 calls, a call waits up to the longer
    queue_timeout_secs, max(30, 60) = 60 s."""
    fleet = live_fleet_summary(uf.LIVE_FLEET)
    assert fleet_lines(fleet) == [
        "parallel calls: 72, bound by decode fleet max_running_requests",
        "parallel calls at the full context of 262144 tokens: 49, bound by decode KV pools at full context",
        "router: 150 in flight, then 30 queued for up to 60 s, then 429",
        "per-call context: 262144 tokens; total context (decode KV pools): 13159040 tokens",
        "decode fleet (2 engines): runs 72 requests at once; 49 at the full context of 262144 tokens",
    ]


def test_the_audit_report_answers_each_live_engine_at_its_own_context() -> None:
    """An engine's own line is at its own effective context, 524,288 (served 524,286 = 2,048 pages = 524,288
    tokens), beside the fleet's: d-zero (reserve 0) 11,159,040 // 524,288 = 21 (22 x 524,288 = 11,534,336 is over);
    d-small (reserve 512) 2,000,000 // 524,800 = 3 (4 x 524,800 = 2,099,200 is over), its 8 slots aside."""
    assert [capacity_lines(s)[0] for s in uf.LIVE_FLEET[2:4]] == [
        "live KV pool 11159040 tokens, effective context 524288: 21 full-length requests fit; with "
        "max_running_requests 64, 21 run at once",
        "live KV pool 2000000 tokens, effective context 524288: 3 full-length requests fit; with "
        "max_running_requests 8, 3 run at once",
    ]


# ---------------------------------------------------------------- the planner


def test_the_planner_counts_each_decode_engines_slots() -> None:
    """decode-03 runs 16 slots, the others 64: 64 + 64 + 16 = 144 calls of 4,000 tokens, below the router's 192."""
    fleet, config = uf.one_small_decode()
    fit = fleet_fit(fleet, config, 4000)
    assert (fit.per_engine, fit.decode_running, fit.parallel, fit.binding) == ((64, 64, 16), 144, 144, RUNNING)


def test_the_planner_raises_only_the_engine_below_the_share() -> None:
    """192 calls over 3 engines need ceil(192 / 3) = 64 slots each: decode-01 and decode-02 have them, decode-03
    (16) is raised to 64; the router's 192 admits them already. The fleet then runs 3 x 64 = 192."""
    fleet, config = uf.one_small_decode()
    first = next(o for o in plan(fleet, config, Shape(192, 4000)).options if o.exact)
    assert first.changes == [("sglang_decode.max_running_requests", 16, 64)]
    assert first.after is not None and first.after.parallel == 192


def test_the_planner_never_lowers_an_engines_slots() -> None:
    """decode-01 runs 200 slots, decode-02 and decode-03 16 (232 together, the router admits 192). 232 calls need
    ceil(232 / 3) = 78 slots an engine: decode-02 and decode-03 go up to 78, decode-01 keeps its 200; the router
    goes to 232."""
    fleet, config = uf.one_large_decode()
    first = next(o for o in plan(fleet, config, Shape(232, 4000)).options if o.exact)
    lowered = [(var, before, after) for var, before, after in first.changes
               if var.endswith("max_running_requests") and after < before]  # fmt: skip
    assert lowered == []
    assert first.changes == [
        ("sglang_decode.max_running_requests", 16, 78),  # decode-02 and decode-03; decode-01 keeps 200
        ("sglang_router.max_concurrent_requests", 192, 232),
    ]
    hosts = first.changed_fleet().hostvars
    assert [hosts[h]["sglang_decode"]["max_running_requests"] for h in ("decode-01", "decode-02", "decode-03")] == [
        200,
        78,
        78,
    ]


@pytest.mark.parametrize("first", ["decode-01", "decode-03"])
def test_the_planners_memory_fraction_is_safe_on_the_smallest_decode_gpu(first: str) -> None:
    """SGLang's own fraction on a decode engine (tp 8, 64 slots: activation max(64, 2,048) = 2,048 tokens; reserve
    max(512 + 1.5 x 2,048 + 8 / 8 x 1,024, 10,240) = 10,240 MiB): on 141 GiB (144,384 MiB) (144,384 - 10,240) /
    144,384 = 0.929; on decode-03's 80 GiB (81,920 MiB) (81,920 - 10,240) / 81,920 = 0.875. The one fraction the
    planner sets on every decode engine is the smaller, 0.875, whichever host is listed first; it leaves 80 x
    (1 - 0.875) = 10.0 GiB on the smallest GPU. 150 calls of 200,000 need it with fp8 index keys (130 fit today)."""
    fleet, config = uf.one_smaller_decode_gpu(first)
    result = plan(fleet, config, Shape(150, 200_000))
    assert result.today.parallel == 130
    best = result.options[0]
    assert (best.title, best.changes) == (
        "decode mem_fraction_static 0.875 (SGLang's own choice on this GPU), fp8 index keys",
        [("sglang_decode.mem_fraction_static", 0.83, 0.875), ("sglang_engine_common.bf16_index_k", True, False)],
    )
    assert best.caveats[0].startswith("leaves 10.0 GiB per GPU outside the static pool"), best.caveats


def test_the_rollout_plan_takes_out_each_engine_in_turn() -> None:
    """Slots 64, 64, 16 (144): a prefill host out leaves 144; decode-01 or decode-02 out leaves 64 + 16 = 80;
    decode-03 out leaves 64 + 64 = 128."""
    fleet, config = uf.one_small_decode()
    whole, steps = rollout_plan(fleet, config, 4000)
    assert whole == 144
    assert [(s.host, s.parallel_left) for s in steps] == [
        ("prefill-01", 144), ("prefill-02", 144), ("decode-01", 80), ("decode-02", 80), ("decode-03", 128)]  # fmt: skip


# ---------------------------------------------------------------- the risks


def test_the_risks_name_only_the_prefill_engine_whose_pool_is_short() -> None:
    """prefill-02's pool is capped at 500,000 // 256 x 256 = 499,968 tokens, below one full prompt plus a chunk
    (524,288 + 8,192 = 532,480); prefill-01's pool holds both. Only prefill-02 is named, and its fix lowers the
    context to (499,968 - 8,192) // 256 x 256 = 491,776."""
    fleet, config = uf.one_small_prefill_pool(500_000)
    found = [f for f in risks(declared_state(fleet, config), fleet, config)
             if f.id == "prefill_pool_below_prompt_plus_chunk"]  # fmt: skip
    assert [(f.servers, f.numbers) for f in found] == [
        (["prefill-02 prefill"], {"pool_tokens": 499_968, "context_length": 524_288, "chunk": 8192})]  # fmt: skip
    assert any("491776" in line for line in found[0].fixes[0]["diff"]), found[0].fixes


def test_the_risks_count_what_each_decode_engine_holds() -> None:
    """At the full served context (524,286 tokens: 2,048 pages = 524,288, + 512 = 524,800) a decode pool of
    11,159,040 tokens holds 21 calls (22 x 524,800 = 11,545,600 is over); decode-03's pool is 11,180,800 (its 16
    slots take less activation memory), also 21 calls, but it runs only 16. The fleet holds 21 + 21 + 16 = 58
    against the router's 192."""
    fleet, config = uf.one_small_decode()
    state = declared_state(fleet, config)
    assert [e.pool_tokens for e in state.role("decode")] == [11_159_040, 11_159_040, 11_180_800]
    found = [f for f in risks(state, fleet, config) if f.id == "router_admits_beyond_full_context"]
    assert [f.numbers for f in found] == [
        {"router_max_concurrent_requests": 192, "decode_holds": 58, "tokens_per_call": 524_286}]  # fmt: skip


def test_the_risks_judge_each_engines_own_memory_fraction() -> None:
    """decode-02 declares mem_fraction_static 0.95 (the others 0.83): it alone leaves 141 x 0.05 = 7.05 GiB outside
    the static pool, less than SGLang's own reserve on this GPU."""
    fleet, config = uf.multinode(**{"decode-02": {"mem_fraction_static": 0.95}})
    found = [f for f in risks(declared_state(fleet, config), fleet, config) if f.id == "headroom_outside_static_pool"]
    assert [(f.servers, f.numbers["outside_gib"], f.numbers["fraction"]) for f in found] == [
        (["decode-02 decode"], 7.05, 0.95)]  # fmt: skip


# ---------------------------------------------------------------- the time model


@pytest.mark.parametrize(
    ("tokens", "running"),
    [
        (None, 64),  # no call length: the smallest engine's running slots, 64 on each
        # 4,000 tokens: 16 pages = 4,096, + 512 = 4,608; decode-02's pool of 10 x 4,608 holds 10 of them
        (4000, 10),
    ],
)
def test_the_time_model_runs_the_smallest_decode_engine(tokens: int | None, running: int) -> None:
    """decode-02's pool is capped at 46,080 = 10 x 4,608 tokens; the others hold about 2,400 calls of 4,000 and run
    64. The time model's decode engine runs what the smallest runs: 10 calls of 4,000 (64 with no length)."""
    fleet, config = uf.one_small_decode_pool(10 * 4608)
    shape = perf.shape_of(fleet, config, tokens)
    assert (shape.decode_engines, shape.decode_max_running, shape.router_max_concurrent) == (3, running, 192)


def test_the_time_model_reads_the_smallest_running_slots() -> None:
    """decode-03 runs 16, the others 64: the time model's decode engine runs 16, with or without a call length."""
    fleet, config = uf.one_small_decode()
    assert [perf.shape_of(fleet, config, t).decode_max_running for t in (None, 4000)] == [16, 16]


# ---------------------------------------------------------------- a request's verdict (check-request)


def _check_request(monkeypatch: pytest.MonkeyPatch, own: dict[str, dict[str, int]], *shape: int) -> int:
    """check_request_command on the multinode inventory with `own` declared in host variables."""
    fleet, _ = uf.multinode(**own)
    monkeypatch.setattr(cli, "load_inventory", lambda inventory: (fleet.hostvars, fleet.groups))
    return cli.check_request_command("multinode", *shape, False)


@pytest.mark.parametrize(
    ("own", "shape", "code", "out"),
    [
        # decode-02 at 262,144; decode-01, the first decode engine, at 524,288 would take it.
        (
            {"decode-02": {"context_length": 262_144}},
            (300_000, 10),
            1,
            "300000 input + 10 new tokens: refused by context_length (HTTP 400): The input (300000 tokens) is longer "
            "than the model's context length (262144 tokens).",
        ),
        # prefill-02 at 131,072: 131,000 + 100 = 131,100 > 131,072.
        (
            {"prefill-02": {"context_length": 131_072}},
            (131_000, 100),
            1,
            "131000 input + 100 new tokens: refused by context_length (HTTP 400): Requested token count exceeds the "
            "model's maximum context length of 131072 tokens. You requested a total of 131100 tokens: 131000 tokens "
            "from the input messages and 100 tokens for the completion. Please reduce the number of tokens in the "
            "input messages or the completion to fit within the limit.",
        ),
        # prefill-02 at 131,072: max_req_len 131,071, max_req_input_len 131,071 - 5 = 131,066 <= 131,068.
        (
            {"prefill-02": {"context_length": 131_072}},
            (131_068, 0),
            1,
            "131068 input + 0 new tokens: refused by max_req_input_len (HTTP 400): Input length (131068 tokens) "
            "exceeds the maximum allowed length (131066 tokens). Use a shorter input or enable --allow-auto-truncate.",
        ),
        # decode-03's pool capped at 100,000 // 256 x 256 = 99,840 tokens: max_req_len = min(524,288 - 1, 99,840 - 1)
        # = 99,839, so 60,000 new tokens after 50,000 are capped at 99,839 - 50,000 - 1 = 49,838.
        (
            {"decode-03": {"max_total_tokens": 100_000}},
            (50_000, 60_000),
            0,
            "50000 input + 60000 new tokens: refused by kv_pool (HTTP 200): no error: the scheduler caps "
            "max_new_tokens at 49838 (max_req_len 99839 = min(context_len - 1, KV pool 99840 - 1)), so the answer "
            "stops early",
        ),
    ],
)
def test_a_request_is_judged_by_the_engine_that_admits_least(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    own: dict[str, dict[str, int]],
    shape: tuple[int, int],
    code: int,
    out: str,
) -> None:
    """smg sends a call to any prefill and any decode engine: the request is judged by every engine's limits, and the
    one engine that refuses it (by context, input length or KV pool) is what the caller meets, wherever it sits in
    the inventory."""
    assert _check_request(monkeypatch, own, *shape) == code
    assert capsys.readouterr().out == out + "\n"


def test_a_short_prefill_pool_does_not_cut_the_answer(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """prefill-02's pool capped at 99,840 tokens (max_req_len 99,839) takes 50,000 + 60,000 = 110,000 tokens of
    length: its length checks pass (110,000 <= 524,288; 50,000 <= its max_req_input_len 99,834). A prefill engine
    generates one token; each engine's scheduler caps max_new_tokens by its own max_req_len, and every decode
    engine keeps the full pool, so the answer is not cut at 49,838: the call is admitted."""
    assert _check_request(monkeypatch, {"prefill-02": {"max_total_tokens": 100_000}}, 50_000, 60_000) == 0
    out = capsys.readouterr().out
    assert out.startswith("50000 input + 60000 new tokens: admitted: "), out
    assert "kv_pool" not in out


def test_a_request_admitted_counts_each_decode_engines_pool(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """decode-03's pool is 99,840 tokens (as above). A call of 5,000 + 10 = 5,010 tokens takes 20 pages = 5,120, +
    512 = 5,632: decode-03 holds 99,840 // 5,632 = 17 (18 x 5,632 = 101,376 is over), decode-01 and decode-02 their
    64 slots (11,159,040 // 5,632 = 1,981 in the pool). 64 + 64 + 17 = 145 at once, below the router's 192."""
    monkeypatch.setattr(cli, "_TIME", {**cli._TIME, "on": False})
    assert _check_request(monkeypatch, {"decode-03": {"max_total_tokens": 100_000}}, 5000, 10) == 0
    assert capsys.readouterr().out.startswith("5000 input + 10 new tokens: admitted: 145 like it run at once; ")


@pytest.mark.parametrize("listed", [("router-01", "router-02"), ("router-02", "router-01")])
@pytest.mark.parametrize(
    ("tokens", "code", "out"),
    [
        # 100,000 tokens: a body of up to 100,000 x 16 + 65,536 = 1,665,536 bytes, over router-02's 1,000,000
        # (router-01 takes up to 536,870,912).
        (
            100_000,
            1,
            "100000 input + 10 new tokens: refused by max_payload_size (HTTP 413): Request body exceeded the payload "
            "limit (max_payload_size) (a body of up to 1665536 bytes against router router-02's "
            "max_payload_size=1000000)",
        ),
        # 58,404 tokens: 934,464 + 65,536 = 1,000,000 bytes, within both.
        (58_404, 0, "58404 input + 10 new tokens: admitted: "),
    ],
)
def test_a_request_is_judged_by_every_router_of_the_front(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    listed: tuple[str, str],
    tokens: int,
    code: int,
    out: str,
) -> None:
    """The front sends a call to router-01 or router-02: router-02 declares max_payload_size 1,000,000, router-01
    keeps 536,870,912. A body over router-02's limit is refused by it, whichever router is listed first."""
    fleet, _ = uf.two_routers({}, {"max_payload_size": 1_000_000})
    fleet.groups["sglang_router"] = list(listed)
    monkeypatch.setattr(cli, "_TIME", {**cli._TIME, "on": False})
    monkeypatch.setattr(cli, "load_inventory", lambda inventory: (fleet.hostvars, fleet.groups))
    assert cli.check_request_command("multinode", tokens, 10, False) == code
    assert capsys.readouterr().out.startswith(out + ("\n" if code else ""))


def test_a_request_admitted_counts_every_routers_admission_and_queue(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """router-01 admits 100 and queues 512 for up to 60 s; router-02 admits 8 and queues 16 for up to 30 s. A call
    of 5,000 + 10 tokens (5,632 with its pages and reserve) fills each decode engine's 64 slots (11,159,040 // 5,632
    = 1,981 in the pool): 192, capped by the routers' 100 + 8 = 108. The next 512 + 16 = 528 wait, on router-02 for
    up to 30 s."""
    fleet, _ = uf.two_routers({"max_concurrent_requests": 100}, {"max_concurrent_requests": 8, "queue_size": 16,
                                                                 "queue_timeout_secs": 30})  # fmt: skip
    monkeypatch.setattr(cli, "_TIME", {**cli._TIME, "on": False})
    monkeypatch.setattr(cli, "load_inventory", lambda inventory: (fleet.hostvars, fleet.groups))
    assert cli.check_request_command("multinode", 5000, 10, False) == 0
    assert capsys.readouterr().out.startswith(
        "5000 input + 10 new tokens: admitted: 108 like it run at once (the routers admit router-01 100, router-02 "
        "8); the next 528 wait in the routers' queues (router-01 512 for up to queue_timeout_secs=60, router-02 16 "
        "for up to queue_timeout_secs=30, then 'timed out waiting for an admission slot'); beyond that smg answers "
        "429 'admission queue is at capacity'\n"
    )


# ---------------------------------------------------------------- the risks: timeouts


def test_the_prefill_timeout_risk_reads_the_fleets_per_call_context() -> None:
    """prefill-02 declares context_length 131,072 (the others 524,288): the fleet serves no call longer than 131,072
    tokens (the fleet answer's per-call context). At a declared 50 tokens/s a full prefill takes 131,072 / 50 =
    2,621.44 s, above the router's request_timeout_secs of 1,800; the fix is ceil(2,621.44 x 1.5) = ceil(3,932.16)
    = 3,933 s. (524,288 / 50 = 10,485.76 s would be a call the fleet never serves.)"""
    fleet, config = uf.multinode(**{"prefill-02": {"context_length": 131_072}})
    for hv in fleet.hostvars.values():
        hv["sglang_workload"] = {"prefill_tokens_per_sec": 50}
    found = [f for f in risks(declared_state(fleet, config), fleet, config)
             if f.id == "request_timeout_below_full_prefill"]  # fmt: skip
    assert [f.numbers for f in found] == [{"prefill_secs": 2621.4, "request_timeout_secs": 1800}]
    assert any("3933" in line for line in found[0].fixes[0]["diff"]), found[0].fixes


def _shapes_both_ways(fleet: Any, config: dict[str, Any]) -> tuple[perf.FleetShape, perf.FleetShape]:
    """The time model's shape of `fleet` as listed, and with each engine group listed in reverse."""
    listed = perf.shape_of(fleet, config, None)
    for group in ("sglang_prefill", "sglang_decode"):
        fleet.groups[group] = fleet.groups[group][::-1]
    return listed, perf.shape_of(fleet, config, None)


def test_the_time_model_prefills_at_the_smallest_chunk_of_any_prefill_engine() -> None:
    """prefill-01 declares chunked_prefill_size 4,096, prefill-02 keeps the 8,192 SGLang resolves on a 141 GiB GPU:
    a prompt that lands on prefill-01 takes a pass per 4,096 tokens (a prompt of 32,768 tokens 8 passes, not 4), so
    the time model prefills at 4,096 whichever prefill host is listed first."""
    fleet, config = uf.multinode(**{"prefill-01": {"chunked_prefill_size": 4096}})
    listed, reversed_ = _shapes_both_ways(fleet, config)
    assert listed == reversed_
    assert listed.chunked_prefill_size == 4096


def test_the_time_model_reads_bf16_index_keys_when_any_engine_holds_them() -> None:
    """decode-01 declares fp8 index keys, decode-02, decode-03 and the prefill engines keep bf16 keys. DeepSeek-V4
    Flash (43 layers: 21 c4, 20 c128; nope 448, rope 64, index_head_dim 128): a latent slot is 448 + 2 x 64 +
    448 / 64 + 1 = 584 bytes; a c4 page (256 / 4 = 64 slots, 37,376 bytes) pads to 65 x 576 = 37,440, 585 per token;
    a c128 page (2 slots, 1,168) pads to 3 x 576 = 1,728, 864 per token. bf16 keys 128 x 2 = 256 bytes: 21 x (585 +
    256) / 4 + 20 x 864 / 128 = 4,415.25 + 135 = 4,550.25 bytes a token (fp8 keys, 128 + 4 = 132: 3,764.25 + 135 =
    3,899.25). A call on decode-02 reads and moves the wider keys, so the time model takes bf16 keys, 4,550.25
    bytes, and the bf16/fp8 key width 256 / 132, whichever decode host is listed first."""
    fleet, config = uf.multinode(**{"decode-01": {"bf16_index_k": False}})
    listed, reversed_ = _shapes_both_ways(fleet, config)
    assert listed == reversed_
    assert (listed.kv_bytes_per_token, listed.key_ratio) == (4550.25, 256 / 132)


def test_the_watchdog_risk_names_the_smallest_watchdog_of_a_role() -> None:
    """The engines load in 250 s; decode-01 declares watchdog_timeout 200 s, decode-02 100 s: both can be killed
    while they load, and the finding states the smallest, 100 s (decode-02), whichever decode host is listed first;
    its fix raises the role's watchdog to ceil(250 x 1.5) = 375 s."""
    fleet, config = uf.multinode(**{"decode-01": {"watchdog_timeout": 200}, "decode-02": {"watchdog_timeout": 100}})
    for hv in fleet.hostvars.values():
        hv["sglang_workload"] = {"model_load_secs": 250}
    found = [f for f in risks(declared_state(fleet, config), fleet, config) if f.id == "watchdog_below_model_load"]
    assert [(f.servers, f.numbers) for f in found] == [
        (["decode-01 decode", "decode-02 decode"], {"model_load_secs": 250, "watchdog_timeout": 100})]  # fmt: skip
    assert any("375" in line for line in found[0].fixes[0]["diff"]), found[0].fixes


@pytest.mark.parametrize("listed", [("router-01", "router-02"), ("router-02", "router-01")])
def test_the_prefill_timeout_risk_states_the_smallest_router_timeout(listed: tuple[str, str]) -> None:
    """router-01 keeps request_timeout_secs 1,800, router-02 declares 900. At a declared 50 tokens/s a full prefill
    of 524,288 tokens takes 524,288 / 50 = 10,485.76 s, beyond both: the finding states 900 s, the timeout a call
    on router-02 meets first, whichever router is listed first; the fix is ceil(10,485.76 x 1.5) = 15,729 s."""
    fleet, config = uf.two_routers({}, {"request_timeout_secs": 900})
    fleet.groups["sglang_router"] = list(listed)
    for hv in fleet.hostvars.values():
        hv["sglang_workload"] = {"prefill_tokens_per_sec": 50}
    found = [f for f in risks(declared_state(fleet, config), fleet, config)
             if f.id == "request_timeout_below_full_prefill"]  # fmt: skip
    assert [f.numbers for f in found] == [{"prefill_secs": 10485.8, "request_timeout_secs": 900}]
    assert any("15729" in line for line in found[0].fixes[0]["diff"]), found[0].fixes
