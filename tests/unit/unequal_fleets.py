"""Fleets whose engines differ, for the pinned tests of the fleet answer, the planner, the risks and the time model.

A fleet of equal engines cannot tell min from max, every from any, or the first engine from the smallest: each
fleet here has one engine that differs from the others in one limit, so a rule that reads the wrong engine gives a
different figure. Two levels:

- engine fleets (sglang_fleet.Engine lists), for the fleet answer itself. Calls are 200,000 tokens: 782 pages of 256
  = 200,192 tokens, 200,704 with a PD decode admission reserve of 512 (SGLang's --num-reserved-decode-tokens);
- live fleets (sglang_report.Server lists), for the audit report's fleet answer: engines as /server_info states
  them and routers as their argv does;
- declared fleets: the multinode inventory (2 prefill, 3 decode, 1 router; every decode engine 64 running slots, the
  router 192) with one host's own envelope changed in its host variables, as an operator writes host_vars.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_fleet import Engine, Memory, answer
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_plan import Fleet
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_report import Server, engine_capacity
from sglang_envelope_cli.commands import model_config_for
from shipped import shipped_inventory

PAGE = 256
RESERVE = 512
CALL = 200_000
PAGED_CALL = 200_192  # 782 x 256
RESERVED_CALL = 200_704  # + 512
CONTEXT = 524_288


def decode(host: str, pool: int, running: int = 256, *, context: int = CONTEXT, ranks: int = 1,
           reserve: int = RESERVE) -> Engine:  # fmt: skip
    return Engine(host, "decode", pool, running, context, PAGE, ranks, reserve)


def prefill(host: str, pool: int = 10_000_000, *, context: int = CONTEXT) -> Engine:
    return Engine(host, "prefill", pool, 256, context, PAGE)


# ---------------------------------------------------------------- engine fleets

# Two prefill pools: one holds 49 calls, the other not one (100,000 < 200,192).
TWO_PREFILL_POOLS = [prefill("p-big"), prefill("p-small", 100_000), decode("d", 100 * RESERVED_CALL)]
# Decode pools of 100 and 10 calls, running slots aside.
UNEQUAL_DECODE_POOLS = [prefill("p"), decode("d-big", 100 * RESERVED_CALL), decode("d-small", 10 * RESERVED_CALL)]
# One engine bound by its running slots (8 of a pool of 100 calls), one by its pool (5 calls, 256 slots).
MIXED_BINDINGS = [prefill("p"), decode("d-slots", 100 * RESERVED_CALL, 8), decode("d-pool", 5 * RESERVED_CALL)]
# A live engine reporting num_reserved_decode_tokens 0 beside one keeping SGLang's 512: the same pool of
# 100 x 200,192 tokens holds 100 calls there and 99 here.
ZERO_RESERVE = [prefill("p"), decode("d-zero", 100 * PAGED_CALL, reserve=0), decode("d-512", 100 * PAGED_CALL)]
# Four attention-DP ranks of 3 calls' pool and 10 slots each beside one rank of 20 calls' pool and 16 slots.
UNEQUAL_RANKS = [prefill("p"), decode("d-dp4", 3 * RESERVED_CALL, 10, ranks=4), decode("d-dp1", 20 * RESERVED_CALL, 16)]
# Contexts of 131,072 (a prefill engine), 262,144 and 524,288 (decode engines).
UNEQUAL_CONTEXTS = [
    prefill("p-short", context=131_072),
    prefill("p-long"),
    decode("d-mid", 10**8, context=262_144),
    decode("d-long", 10**8),
]


# ---------------------------------------------------------------- live fleets


def live_engine(host: str, role: str, pool: int, running: int, context: int = CONTEXT, **more: Any) -> Server:
    """An engine as the audit reads it: its /server_info values (`more` adds some, as num_reserved_decode_tokens)
    and the capacity entry the report makes of them."""
    live = {"max_total_tokens": pool, "max_running_requests": running, "context_length": context, "page_size": PAGE,
            "disaggregation_mode": role, **more}  # fmt: skip
    server = Server(host, role, "ok", live=live)
    server.capacity = engine_capacity(server, None)
    return server


def live_router(host: str, admits: int, queue: int, queue_timeout: int) -> Server:
    live = {"max_concurrent_requests": admits, "queue_size": queue, "queue_timeout_secs": queue_timeout}
    return Server(host, "router", "ok", live=live)


# Prefill contexts of 524,288 and 262,144; a decode engine reporting num_reserved_decode_tokens 0 with 64 slots
# beside a small one keeping SGLang's 512 with 8; two routers admitting 100 and 50.
LIVE_FLEET = [
    live_engine("p-long", "prefill", 10_000_000, 256),
    live_engine("p-short", "prefill", 4_000_000, 256, 262_144),
    live_engine("d-zero", "decode", 11_159_040, 64, num_reserved_decode_tokens=0),
    live_engine("d-small", "decode", 2_000_000, 8),
    live_router("r-1", 100, 10, 30),
    live_router("r-2", 50, 20, 60),
]

# ---------------------------------------------------------------- declared fleets


def multinode(**own: dict[str, Any]) -> tuple[Fleet, dict[str, Any]]:
    """The multinode fleet, each host named in `own` with those keys in its own role dict (host_vars), and the
    model's config. `own={"decode-03": {"max_running_requests": 16}}` declares sglang_decode on decode-03."""
    hostvars, groups = shipped_inventory("multinode")
    fleet = Fleet({h: dict(v) for h, v in hostvars.items()}, groups)
    for host, keys in own.items():
        role = "prefill" if host.startswith("prefill") else "decode"
        hv = fleet.hostvars[host]
        hv[f"sglang_{role}"] = {**(hv.get(f"sglang_{role}") or {}), **keys}
    return fleet, model_config_for(hostvars[fleet.hosts("decode")[0]])


def two_routers(first: dict[str, Any], second: dict[str, Any]) -> tuple[Fleet, dict[str, Any]]:
    """The multinode fleet with a second router, router-02, a copy of router-01 in every group of it; `first` and
    `second` are added to their sglang_router (host_vars)."""
    fleet, config = multinode()
    fleet.hostvars["router-02"] = dict(fleet.hostvars["router-01"])
    for host, keys in (("router-01", first), ("router-02", second)):
        fleet.hostvars[host]["sglang_router"] = {**fleet.hostvars[host]["sglang_router"], **keys}
    for members in fleet.groups.values():
        if "router-01" in members:
            members.append("router-02")
    return fleet, config


def one_small_decode() -> tuple[Fleet, dict[str, Any]]:
    """decode-03 runs 16 slots, the others 64."""
    return multinode(**{"decode-03": {"max_running_requests": 16}})


def one_large_decode() -> tuple[Fleet, dict[str, Any]]:
    """decode-01 runs 200 slots, decode-02 and decode-03 16 each."""
    return multinode(**{"decode-01": {"max_running_requests": 200}, "decode-02": {"max_running_requests": 16},
                        "decode-03": {"max_running_requests": 16}})  # fmt: skip


def one_smaller_decode_gpu(first: str = "decode-01") -> tuple[Fleet, dict[str, Any]]:
    """decode-03 on a GPU of 80 GiB, the others on their 141; `first` is listed first among the decode hosts."""
    fleet, config = multinode()
    fleet.hostvars["decode-03"]["sglang_gpu_memory_gib"] = 80
    decode = fleet.groups["sglang_decode"]
    fleet.groups["sglang_decode"] = [first, *(h for h in decode if h != first)]
    return fleet, config


def one_small_prefill_pool(tokens: int) -> tuple[Fleet, dict[str, Any]]:
    """prefill-02's KV pool capped at `tokens` (max_total_tokens), prefill-01's as the memory gives it."""
    return multinode(**{"prefill-02": {"max_total_tokens": tokens}})


def one_small_decode_pool(tokens: int) -> tuple[Fleet, dict[str, Any]]:
    """decode-02's KV pool capped at `tokens` (max_total_tokens)."""
    return multinode(**{"decode-02": {"max_total_tokens": tokens}})


def answer_of(engines: list[Engine]) -> Memory:
    """The fleet answer's memory part for calls of CALL tokens, without a router."""
    return answer(engines, [], CALL).memory
