"""The audit report's pieces written out whole: a server's entry from its record (file metadata and router workers
judged, the latency summary with the running requests), the live engine as capacity limits, the capacity entry and
the fleet answer, the front hosts' reads, and the fleet lines and Markdown front section."""

from __future__ import annotations

from typing import Any

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_capacity import EngineLimits
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_report
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_fleet import Engine
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_plan import Fleet
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_report import (
    Server,
    build,
    engine_capacity,
    fleet_lines,
    front_state,
    live_fleet_summary,
    render_markdown,
    server_from_record,
)
from test_sglang_report import decode_record

NO_LAYERS = dict.fromkeys(sglang_report.LAYER_FIELDS)


def test_a_file_whose_group_and_mode_differ_from_the_declared_ones_drifts() -> None:
    record = {
        "host": "h1",
        "role": "decode",
        "declared": {},
        "layers": {"files": {"env": {"exists": True, "path": "/etc/x.env", "owner": "root", "group": "root",
                                     "mode": "0644"}}},
        "live": {},
        "declared_files": {"env": {"owner": "root", "group": "sglang", "mode": "0640"}},
    }  # fmt: skip
    server = server_from_record(record)
    assert (server.status, server.drift) == (
        "drift",
        [
            {
                "key": "file:env",
                "layer": "on_disk",
                "layers": ["on_disk"],
                "declared": "root:sglang 0640",
                "live": "root:root 0644",
                "severity": "drift",
                "explanation": "/etc/x.env is root:root 0644, the roles declare root:sglang 0640 (group, mode differ): "
                "changed on the host or left by an interrupted rollback; rerun site.yml",
            }
        ],
    )


def test_a_router_missing_a_declared_worker_and_routing_to_an_undeclared_one_drifts_twice() -> None:
    record = {
        "host": "r1",
        "role": "router",
        "declared": {},
        "layers": {},
        "live": {"router": {"workers": [{"type": "decode", "url": "http://d1:30001/"}]}},
        "expected_workers": {"decode": ["http://d2:30001"]},
    }
    server = server_from_record(record)
    assert (server.status, server.drift) == (
        "drift",
        [
            {
                "key": "workers",
                "layer": "effective",
                "layers": ["effective"],
                "declared": "http://d2:30001",
                "live": None,
                "severity": "drift",
                "explanation": "decode worker http://d2:30001 missing: the router does not route to it; site.yml "
                "puts it back",
            },
            {
                "key": "workers",
                "layer": "effective",
                "layers": ["effective"],
                "declared": None,
                "live": "http://d1:30001",
                "severity": "drift",
                "explanation": "decode worker http://d1:30001 unexpected: the inventory does not declare it",
            },
        ],
    )


def test_the_latency_summary_carries_the_running_requests_of_the_load() -> None:
    record = {
        "host": "h1",
        "role": "decode",
        "declared": {},
        "layers": {},
        "live": {"endpoint": "e", "load": {"running": 3}, "latency": {"requests": 2}},
    }
    server = server_from_record(record)
    assert (server.status, server.endpoint, server.load, server.layers) == ("ok", "e", {"running": 3}, NO_LAYERS)
    assert server.latency == {
        "requests": 2,
        "prompt_tokens_per_request": 0.0,
        "generation_tokens_per_request": 0.0,
        "running": 3,
    }
    without_load = {**record, "live": {"latency": {"requests": 2}}}
    assert server_from_record(without_load).latency == {
        "requests": 2,
        "prompt_tokens_per_request": 0.0,
        "generation_tokens_per_request": 0.0,
    }


LIVE = {"context_length": 1000, "max_total_tokens": 5000, "max_running_requests": 8, "page_size": 4}


def test_the_live_engine_as_limits_knows_only_pool_context_page_running_and_reserve() -> None:
    # request_lengths: the longest request is the context less one, its input five tokens less. One rank's running
    # slots and reserve come from the engine (Engine.from_live: the live max_running_requests is the whole engine's).
    one_rank = Engine("h", "prefill", 5000, 8, 1000, 4)
    assert sglang_report._live_limits(LIVE, 5000, one_rank) == EngineLimits(
        resolved={}, context_len=1000, max_total_num_tokens=5000, token_capacity_swa=None, max_running_requests=8,
        max_req_len=999, max_req_input_len=994, page_size=4, bytes_per_token=0.0, fixed_bytes=0, weights_bytes=0,
        kv_budget_bytes=0, memory_usage={}, admission_reserve=0,
    )  # fmt: skip
    reserved = Engine("h", "decode", 800, 8, 1000, 4, reserve=512)
    assert sglang_report._live_limits(LIVE, 800, reserved).admission_reserve == 512
    two_ranks = Engine("h", "decode", 5000, 4, 1000, 4, ranks=2)
    assert sglang_report._live_limits(LIVE, 5000, two_ranks).max_running_requests == 4


ROW = {"context_len": 1000, "fit_in_pool": 5, "concurrent": 5, "binding": "kv_pool", "fit_fp8_index": None,
       "lost_to_bf16_index": None}  # fmt: skip


def capacity(server: Server) -> dict[str, Any]:
    return {k: v for k, v in engine_capacity(server, None).items() if k != "_rows"}


def test_a_prefill_engine_on_one_rank_without_a_reserve_states_neither() -> None:
    # 5,000 tokens in pages of 4 hold five calls of 1,000 tokens; max_running_requests 8 does not bind.
    assert capacity(Server("h", "prefill", "ok", live=dict(LIVE))) == {
        "context_length": 1000, "pool_tokens": 5000, "page_size": 4, "max_running_requests": 8,
        "full_length_fit": 5, "full_length_at_once": 5, "bf16_index_k": None, "bf16_index_share": None,
        "table": [ROW],
    }  # fmt: skip


def test_two_attention_dp_ranks_are_stated_even_without_a_reserve() -> None:
    server = Server("h", "prefill", "ok", live=dict(LIVE), live_facts={"attn_dp_size": 2})
    assert sglang_report._live_engine(server) == Engine("h", "prefill", 5000, 4, 1000, 4, 2, 0)
    # Each rank has its own 5,000-token pool and four of the eight running slots: the engine fits 2 x 5 = 10 calls
    # of 1,000 tokens and runs 2 x 4 = 8 of them, in its table as in its figures.
    two_ranks = {**ROW, "fit_in_pool": 10, "concurrent": 8, "binding": "max_running_requests"}
    assert capacity(server) == {
        "context_length": 1000, "pool_tokens": 5000, "page_size": 4, "max_running_requests": 8,
        "full_length_fit": 10, "full_length_at_once": 8, "bf16_index_k": None, "bf16_index_share": None,
        "ranks": 2, "admission_reserve": 0, "table": [two_ranks],
    }  # fmt: skip


def cap(context: int, pool: int, running: int, **more: int) -> dict[str, int]:
    return {"context_length": context, "pool_tokens": pool, "max_running_requests": running, **more}


def test_the_capacity_entry_gives_the_engine_back_with_its_ranks_page_and_reserve() -> None:
    stated = Server("h", "decode", "ok", capacity=cap(1000, 5000, 8, ranks=2, page_size=4, admission_reserve=7))
    assert sglang_report._capacity_engine(stated) == Engine("h", "decode", 5000, 4, 1000, 4, 2, 7)
    bare = Server("h", "decode", "ok", capacity=cap(1000, 5000, 8))
    assert sglang_report._capacity_engine(bare) == Engine("h", "decode", 5000, 8, 1000, 1, 1, 0)


def test_short_calls_bound_by_a_tiny_decode_pool_name_the_pools() -> None:
    # Ten one-token calls fit ten tokens; not one call at the 1,000-token context does.
    assert live_fleet_summary([Server("d1", "decode", "ok", capacity=cap(1000, 10, 100))]) == {
        "routers": 0, "decode_engines": 1, "decode_running": 100, "decode_full_length_at_once": 0,
        "decode_full_length_fit": 0, "context_length": 1000, "decode_pool_tokens": 10, "parallel_calls": 10,
        "binding": "decode KV pools", "parallel_calls_full_context": 0,
        "binding_full_context": "decode KV pools at full context",
    }  # fmt: skip


def test_a_prefill_engine_with_a_shorter_context_sets_the_per_call_context() -> None:
    decode = Server("d1", "decode", "ok", capacity=cap(1000, 100000, 100))
    prefill = Server("p1", "prefill", "ok", capacity=cap(500, 50000, 2))
    assert live_fleet_summary([decode, prefill]) == {
        "routers": 0, "decode_engines": 1, "decode_running": 100, "decode_full_length_at_once": 100,
        "decode_full_length_fit": 200, "context_length": 500, "decode_pool_tokens": 100000, "parallel_calls": 100,
        "binding": "decode fleet max_running_requests", "parallel_calls_full_context": 100,
        "binding_full_context": "decode fleet max_running_requests",
    }  # fmt: skip


def test_a_front_not_read_says_why_or_not_read() -> None:
    up = [{"server": "r1", "status": "UP", "sessions": 0}]
    reads = {
        "f1": {"servers": up, "failed": True, "msg": "task failed"},
        "f2": {"servers": up, "unreachable": True},
        "f3": {},
        "f4": {"servers": up},
    }
    assert front_state(reads, ["r1"]) == {
        "f1": {"error": "task failed"},
        "f2": {"error": "not read"},
        "f3": {"error": "not read"},
        "f4": {"rows": [{"router": "r1", "state": "in", "status": "UP", "sessions": 0}]},
    }


def test_the_markdown_front_section_lists_each_front_host() -> None:
    declared = Fleet({}, {"sglang_router": ["r1"]})
    up = [{"server": "r1", "status": "UP", "sessions": 2}]
    built = build([], True, declared, fronts={"f1": {"servers": up}, "f2": {"failed": True, "msg": "a|b"}})
    assert render_markdown(built).splitlines() == [
        "# SGLang limits audit",
        "",
        "0 servers: 0 ok, 0 drifting (0 items), 0 unreachable, 0 with errors.",
        "",
        "## Fleet",
        "",
        "",
        "## Risks (from the live values)",
        "",
        "None found.",
        "",
        "## Front",
        "",
        "- f1: r1 in (UP, 2 open)",
        "- f2: not read (a\\|b)",
        "",
        "Legend: (drift) leaves the declaration, (info) information only, - unset, n/a not reported.",
    ]


def test_an_unavailable_prediction_is_said_and_the_next_shape_and_the_measured_time_still_listed() -> None:
    fleet = {
        "parallel_calls": 10,
        "binding": "decode KV pools",
        "predicted_time": [
            {"shape": "s1", "unavailable": "time: no model"},
            {"shape": "s2", "ttft_p50": "1 s", "ttft_p90": "2 s", "itl_p50": "3 ms", "itl_p90": "4 ms", "binding": "b"},
        ],
        "measured_time": {"roles": {}},
    }
    assert fleet_lines(fleet) == [
        "parallel calls: 10, bound by decode KV pools",
        "predicted time, s1: no model",
        "predicted time, s2: TTFT p50 1 s, p90 2 s; ITL p50 3 ms, p90 4 ms; bound by b",
        "measured time: no decode engine published its latency (/metrics)",
    ]


def predicted(ms: float) -> dict[str, Any]:
    return {"ms": ms, "text": f"{ms} ms (hand)"}


# A measured TTFT p50 of 160 ms over exactly 20 requests against a predicted 100 ms: 1.60 x, beyond +-50 %. The
# ITL p50 (50 ms against 10 ms) counts 19 finished requests, too few to judge.
MEASURED = {
    "roles": {
        "decode": {
            "engines": ["lab1"],
            "source": "S",
            "requests": 19,
            "ttft": {"count": 20, "p50_s": 0.16},
            "itl": {"count": 100, "p50_s": 0.05},
        }
    },
    "at_load": {
        "workload": {"isl": 1500, "osl": 32, "concurrency": 12},
        "ttft_p50": predicted(100.0),
        "ttft_p90": predicted(200.0),
        "itl_p50": predicted(10.0),
        "itl_p90": predicted(20.0),
    },
}


def test_the_measured_time_risk_follows_the_live_risks_at_the_default_tolerance_and_count() -> None:
    shapes = [{"shape": "s1", "unavailable": "no model"}]
    built = build([decode_record()], predicted_time=shapes, measured_time=MEASURED)
    assert built.fleet["predicted_time"] == [{"shape": "s1", "unavailable": "no model"}]
    assert built.fleet["measured_time"] == MEASURED
    assert [r["id"] for r in built.risks] == ["single_decode_engine", "measured_time_off_model"]
    assert built.risks[1]["summary"] == (
        "measured TTFT p50 160.0 ms (S) is 1.60 x the time model's 100.0 ms at the measured load (12 call(s) of "
        "1,500 in + 32 out), beyond +-50%: the hardware is the truth: recalibrate with plan --from-live"
    )
