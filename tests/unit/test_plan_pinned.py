"""The planner's answers on the multinode inventory (2 prefill, 3 decode, 1 router host), pinned to figures worked out
by hand from the declaration, each case one where a single rule decides the answer.

The declaration (group_vars/all/envelope.yml, inventories/multinode): every decode engine runs max_running_requests
64, the router admits max_concurrent_requests 192 = 3 x 64. The calls are short (4,000 tokens), so the KV pools
never bind: a decode engine holds 11,159,040 KV tokens (the capacity model's figure, held to SGLang by
tests/component/conformance), and a call of 4,000 tokens takes 16 pages of 256 = 4,096 tokens (4,608 with a PD decode
admission reserve of 512 per call), so a pool admits about 2,400 such calls, against 64 to 102 running slots. Every
figure below is therefore a count of running slots and router admissions.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_declared import engine_envelope
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_plan import (
    Fleet,
    Option,
    PlanError,
    Shape,
    change,
    extend,
    fleet_answer,
    fleet_fit,
    plan,
    render,
)
from sglang_envelope_cli.commands import model_config_for
from shipped import shipped_inventory

CALL = 4000  # tokens per call (prompt + output)


def multinode() -> tuple[Fleet, dict[str, Any]]:
    hostvars, groups = shipped_inventory("multinode")
    fleet = Fleet({h: dict(v) for h, v in hostvars.items()}, groups)
    return fleet, model_config_for(hostvars[fleet.hosts("decode")[0]])


def answers(fleet: Fleet, config: dict[str, Any], calls: int) -> list[Any]:
    """The options that serve the shape as asked (calls of the full length), best first."""
    return [o for o in plan(fleet, config, Shape(calls, CALL)).options if o.exact]


def test_today_the_running_slots_and_the_router_admit_192() -> None:
    fleet, config = multinode()
    today = fleet_fit(fleet, config, CALL)
    assert today.per_engine == (64, 64, 64)
    assert (today.parallel, today.router_cap, today.decode_running) == (192, 192, 192)
    assert today.binding == "decode max_running_requests"  # a tie with the router (192 = 192) names the engines


# ---------------------------------------------------------------- rounding per decode engine


@pytest.mark.parametrize(
    ("calls", "per_engine", "router"),
    [
        (300, 100, 300),  # 300 / 3 = 100 exactly
        (301, 101, 301),  # 301 / 3 = 100.33: 100 per engine runs 300, one short; 101 runs 303
        (302, 101, 302),  # 302 / 3 = 100.67 -> 101
        (303, 101, 303),  # 303 / 3 = 101 exactly
        (304, 102, 304),  # 304 / 3 = 101.33 -> 102
    ],
    ids=["300-calls", "301-calls", "302-calls", "303-calls", "304-calls"],
)
def test_running_slots_are_raised_to_the_calls_rounded_up_per_decode_engine(
    calls: int, per_engine: int, router: int
) -> None:
    """No host is added: raising max_running_requests on the three engines to ceil(calls / 3) admits every call,
    and the router's cap goes to min(calls, 3 x that) = the calls."""
    fleet, config = multinode()
    assert math.ceil(calls / 3) == per_engine and 3 * per_engine >= calls > 3 * (per_engine - 1)
    first = answers(fleet, config, calls)[0]
    assert first.title == "admit more calls"
    assert first.added_hosts == []
    assert first.caveats == []
    assert first.changes == [
        ("sglang_decode.max_running_requests", 64, per_engine),
        ("sglang_router.max_concurrent_requests", 192, router),
    ]
    assert first.after is not None
    assert (first.after.parallel, first.after.decode_running, first.after.router_cap) == (calls, 3 * per_engine, router)


# ---------------------------------------------------------------- dominance


def test_an_answer_no_cheaper_on_any_lever_than_a_kept_one_is_dropped() -> None:
    """301 calls: admitting them (no host, no recall cost) is the one answer. Raising decode mem_fraction_static to
    SGLang's own choice also serves them with no host and no recall cost, and fp8 index keys do with no host but a
    recall cost: both are no cheaper on any lever, so neither is listed."""
    fleet, config = multinode()
    assert [o.title for o in answers(fleet, config, 301)] == ["admit more calls"]
    # The dropped ones do serve the shape and pass validation: only the dominance rule removes them.
    # SGLang's own fraction on a 141 GiB GPU at tp 4: reserve max(512 + 1.5 x 2048 + 4/8 x 1024, 10240) = 10,240
    # MiB of 141 x 1024 = 144,384 MiB, so (144384 - 10240) / 144384 = 0.929.
    admit = [("decode", "max_running_requests", 101), ("router", "max_concurrent_requests", 301)]
    for levers in ([("decode", "mem_fraction_static", 0.929)], [("decode", "bf16_index_k", False),
                                                               ("prefill", "bf16_index_k", False)]):  # fmt: skip
        dropped = change(fleet, config, "dropped", levers + admit)
        assert dropped.refused == [], dropped.refused
        assert fleet_fit(dropped.changed_fleet(), config, CALL).parallel >= 301


# ---------------------------------------------------------------- router caps across routers


def two_routers(first: int | None, second: int | None) -> Fleet:
    """The multinode fleet with a second router; None: that router declares no max_concurrent_requests."""
    fleet, _config = multinode()
    fleet.hostvars["router-02"] = {**fleet.hostvars["router-01"], "inventory_hostname": "router-02"}
    fleet.groups["sglang_router"] = ["router-01", "router-02"]
    for host, cap in (("router-01", first), ("router-02", second)):
        router = {k: v for k, v in fleet.hostvars[host]["sglang_router"].items() if k != "max_concurrent_requests"}
        if cap is not None:
            router["max_concurrent_requests"] = cap
        fleet.hostvars[host] = {**fleet.hostvars[host], "sglang_router": router}
    return fleet


@pytest.mark.parametrize(
    ("caps", "admits", "parallel"),
    [
        ((50, 60), 110, 110),  # both capped: 50 + 60 = 110 admitted, below the engines' 192
        ((50, None), None, 192),  # the second router admits without bound: the engines' 3 x 64 bind
        ((None, 50), None, 192),
        ((50, 0), None, 192),  # 0: no cap (smg's max_concurrent_requests <= 0 disables its limiter)
        ((0, 50), None, 192),
        ((None, None), None, 192),
    ],
    ids=["both-capped", "second-uncapped", "first-uncapped", "second-cap-0", "first-cap-0", "none-capped"],
)
def test_the_routers_admit_the_sum_of_their_caps_only_when_every_router_has_one(
    caps: tuple[int | None, int | None], admits: int | None, parallel: int
) -> None:
    fleet = two_routers(*caps)
    _fleet, config = multinode()
    fit = fleet_fit(fleet, config, CALL)
    assert (fit.router_cap, fit.parallel) == (admits, parallel)
    # 100 calls: they fit today unless both routers are capped (110 still admits them; 50 + 60 is not 50).
    assert plan(fleet, config, Shape(100, CALL)).fits_today


def test_two_capped_routers_below_the_calls_do_not_fit() -> None:
    fleet = two_routers(50, 40)
    _fleet, config = multinode()
    result = plan(fleet, config, Shape(100, CALL))
    assert (result.today.parallel, result.today.router_cap) == (90, 90)  # 50 + 40
    assert not result.fits_today


def test_admitting_more_calls_splits_them_over_the_routers() -> None:
    """300 calls behind two routers capped at 50 and 40: the three decode engines go to 100 running requests each, and
    each router to 150, half the calls, since each admits its own cap; 300 + 300 would admit twice what the engines
    run, which validation refuses."""
    fleet = two_routers(50, 40)
    _fleet, config = multinode()
    first = answers(fleet, config, 300)[0]
    assert first.title == "admit more calls"
    assert first.changes == [
        ("sglang_decode.max_running_requests", 64, 100),
        ("sglang_router.max_concurrent_requests", 50, 150),
        ("sglang_router.max_concurrent_requests", 40, 150),
    ]
    assert first.after is not None
    assert (first.after.parallel, first.after.decode_running, first.after.router_cap) == (300, 300, 300)
    assert first.refused == []  # the changed fleet passes validation


def test_calls_that_do_not_split_evenly_over_the_routers_are_admitted_by_rounding_each_share_up() -> None:
    """303 calls behind two routers capped at 50 and 40: each router's share is ceil(303 / 2) = 152, so the routers
    admit 304 together. Validation holds their sum to the decode fleet's running slots, so the three decode engines go
    to ceil(304 / 3) = 102 each (306), not ceil(303 / 3) = 101 (303, below the routers' 304), and no host is added."""
    fleet = two_routers(50, 40)
    _fleet, config = multinode()
    first = answers(fleet, config, 303)[0]
    assert first.title == "admit more calls"
    assert first.added_hosts == []
    assert first.changes == [
        ("sglang_decode.max_running_requests", 64, 102),
        ("sglang_router.max_concurrent_requests", 50, 152),
        ("sglang_router.max_concurrent_requests", 40, 152),
    ]
    assert first.after is not None
    assert (first.after.parallel, first.after.decode_running, first.after.router_cap) == (304, 306, 304)
    assert first.refused == []


ADMIT_300 = ("sglang_decode.max_running_requests", 64, 100)  # 300 calls over 3 decode engines


@pytest.mark.parametrize(
    ("caps", "routers"),
    [
        ((1, 1), [("sglang_router.max_concurrent_requests", 1, 150)]),  # a cap of 1 is a bound like any other
        # no bound (0, or no cap): validation refuses it, and the option gives each router its share
        ((0, 0), [("sglang_router.max_concurrent_requests", 0, 150)]),
        ((None, None), [("sglang_router.max_concurrent_requests", None, 150)]),
        ((150, 150), []),  # each router already admits its share: only the engines rise
    ],
    ids=["caps-of-1", "caps-of-0", "no-caps", "caps-at-the-share"],
)
def test_each_router_gets_its_share_where_it_has_no_bound_or_a_lower_one(
    caps: tuple[int | None, int | None], routers: list[tuple[str, int | None, int]]
) -> None:
    """300 calls behind two routers: a share of 150 each, and 100 running requests on each decode engine. An edit
    that every router shares is listed once."""
    fleet = two_routers(*caps)
    _fleet, config = multinode()
    first = answers(fleet, config, 300)[0]
    assert (first.title, first.changes, first.refused) == ("admit more calls", [ADMIT_300, *routers], [])
    assert first.after is not None
    assert (first.after.parallel, first.after.decode_running, first.after.router_cap) == (300, 300, 300)


@pytest.mark.parametrize(
    ("calls", "caps", "running", "parallel"),
    [
        (303, (152, 152), 102, 304),  # the routers admit 304 together: ceil(304 / 3) = 102, not ceil(303 / 3) = 101
        (300, (160, 160), 107, 320),  # 320 together: ceil(320 / 3) = 107 (321), not 100 (300)
    ],
    ids=["caps-at-the-share-of-an-odd-count", "caps-above-the-share"],
)
def test_routers_that_admit_their_share_already_keep_their_caps_and_the_engines_run_what_they_admit(
    calls: int, caps: tuple[int, int], running: int, parallel: int
) -> None:
    """Validation holds the routers' caps together to the decode fleet's running slots, so the engines rise to what
    the routers admit together when that is more than the calls."""
    fleet = two_routers(*caps)
    _fleet, config = multinode()
    first = answers(fleet, config, calls)[0]
    changes = [("sglang_decode.max_running_requests", 64, running)]
    assert (first.title, first.changes, first.refused) == ("admit more calls", changes, [])
    assert first.after is not None
    assert (first.after.parallel, first.after.decode_running, first.after.router_cap) == (
        parallel,
        3 * running,
        sum(caps),
    )


def test_a_fleet_without_a_router_admits_calls_with_its_decode_slots_alone() -> None:
    """No router host (clients reach the engines through something else): 301 calls raise the decode slots to
    ceil(301 / 3) = 101, and nothing admits fewer."""
    fleet, config = multinode()
    fleet.groups["sglang_router"] = []
    first = answers(fleet, config, 301)[0]
    assert (first.title, first.changes) == ("admit more calls", [("sglang_decode.max_running_requests", 64, 101)])
    assert first.after is not None
    assert (first.after.parallel, first.after.decode_running, first.after.router_cap) == (303, 303, None)


# ---------------------------------------------------------------- the boundary of "fits"


@pytest.mark.parametrize(("calls", "fits"), [(191, True), (192, True), (193, False)], ids=["191", "192", "193"])
def test_a_shape_the_fleet_runs_exactly_fits_today(calls: int, fits: bool) -> None:
    """3 x 64 = 192 running slots and a router cap of 192: 192 calls fit with nothing to change, 193 do not."""
    fleet, config = multinode()
    result = plan(fleet, config, Shape(calls, CALL))
    assert result.fits_today is fits
    assert (result.options == []) is fits


# ---------------------------------------------------------------- the per-call context


def test_the_per_call_context_is_the_smallest_context_length_of_any_engine() -> None:
    """smg pairs any prefill with any decode engine: one prefill engine declared at context_length 8,192 makes it
    the fleet's per-call context. Calls of 4,000 tokens still run 192 at once; calls of 16,000 run none."""
    fleet, config = multinode()
    host = fleet.hostvars["prefill-01"]
    fleet.hostvars["prefill-01"] = {**host, "sglang_prefill": {**host["sglang_prefill"], "context_length": 8192}}
    short = fleet_fit(fleet, config, CALL)
    assert (short.context_length, short.parallel) == (8192, 192)
    long = fleet_fit(fleet, config, 16_000)
    assert (long.context_length, long.parallel, long.binding) == (8192, 0, "per-call context_length")


# ---------------------------------------------------------------- an option extended (the time planner's extra prefill)


def test_an_extended_option_keeps_the_changes_it_builds_on() -> None:
    """Raising the decode slots to 84 (3 x 84 = 252 running, the router cap 252), then one more prefill host and a
    4,096-token chunk: the title joins both, every change and host of the base is kept, and the answer is the base's
    252 calls of 4,000 tokens (a prefill host adds no decode slot)."""
    fleet, config = multinode()
    settings = [("decode", "max_running_requests", 84), ("router", "max_concurrent_requests", 252)]
    base = change(fleet, config, "raise decode max_running_requests to 84", settings)
    base.caveats.append("a caveat of the base")
    out = extend(base, config, Shape(250, CALL), "add 1 prefill host", [("prefill", "chunked_prefill_size", 4096)],
                 add_prefill_hosts=1)  # fmt: skip
    assert out.title == "raise decode max_running_requests to 84, add 1 prefill host"
    assert out.changes == [
        ("sglang_decode.max_running_requests", 64, 84),
        ("sglang_router.max_concurrent_requests", 192, 252),
        # The shared dict holds chunked_prefill_size 8192: a prefill-only change goes into the prefill's own dict.
        ("sglang_prefill.chunked_prefill_size", 8192, 4096),
    ]
    changed = out.changed_fleet()
    for host in changed.hosts("decode"):
        assert engine_envelope("decode", changed.hostvars[host])["chunked_prefill_size"] == 8192
    assert out.added_hosts == ["prefill-01-prefill3 (a copy of prefill-01's prefill engine, 1 of 1)"]
    assert out.caveats == ["a caveat of the base"] and out.exact is True and out.refused == []
    assert out.after is not None
    assert (out.after.tokens, out.after.parallel, out.after.per_engine, out.after.router_cap) == (
        4000,
        252,
        (84,) * 3,
        252,
    )
    assert out.rank == (False, 1)  # serves the shape as asked, one host added
    assert base.changes[-1] == ("sglang_router.max_concurrent_requests", 192, 252) and base.added_hosts == []


def test_an_extension_of_todays_fleet_takes_its_own_title_and_adds_no_host_unasked() -> None:
    fleet, config = multinode()
    out = extend(Option("admit more calls", fleet=fleet.copy()), config, Shape(250, CALL), "add 2 prefill hosts", [])
    assert (out.title, out.changes, out.added_hosts, out.rank) == ("add 2 prefill hosts", [], [], (False, 0))
    assert out.after is not None and (out.after.tokens, out.after.parallel) == (4000, 192)


def test_a_shorter_call_option_stays_shorter_when_extended() -> None:
    """A context of 2,048 serves 2,046 tokens per call (SGLang keeps context - 2 for the prompt and one output):
    the extension is sized at those, not at the 4,000 asked, and ranks after the options that serve the shape."""
    fleet, config = multinode()
    shape = Shape(250, CALL)
    short = change(
        fleet, config, "context 2048", [("decode", "context_length", 2048), ("prefill", "context_length", 2048)]
    )
    short.exact = False
    short.after = fleet_fit(short.changed_fleet(), config, None)
    assert short.tokens(shape) == 2046
    out = extend(short, config, shape, "add 1 prefill host", [], add_prefill_hosts=1)
    assert out.exact is False and out.rank == (True, 1)
    assert out.after is not None and (out.after.tokens, out.after.parallel) == (2046, 192)
    assert out.tokens(shape) == 2046
    assert Option("as asked", after=short.after).tokens(shape) == 4000  # an exact option serves the shape's tokens
    assert Option("not sized", exact=False).tokens(shape) == 4000  # no answer yet: the shape's tokens


def test_an_extension_the_validation_refuses_has_no_answer() -> None:
    fleet, config = multinode()
    out = extend(Option("admit more calls", fleet=fleet.copy()), config, Shape(250, CALL), "bad chunk",
                 [("prefill", "chunked_prefill_size", -5)])  # fmt: skip
    rule = (
        "must be a positive chunk size, or -1 to disable chunked prefill [engine.chunked_prefill_size_valid]; fix: "
        "declare e.g. 8192"
    )
    assert out.refused == [f"{h}: sglang_prefill.chunked_prefill_size=-5: {rule}" for h in ("prefill-01", "prefill-02")]
    assert out.after is None and out.rank == ()


# ---------------------------------------------------------------- the plan as text


def test_a_shared_setting_is_listed_once() -> None:
    """context_length lives in sglang_engine_common, shared by prefill and decode: the shorter-call option edits it
    once and lists it once (it was listed per role)."""
    fleet, config = multinode()
    result = plan(fleet, config, Shape(250, CALL))
    shorter = (result.options + result.shorter)[-1]
    edits = [c for c in shorter.changes if c[0] == "sglang_engine_common.context_length"]
    assert edits == [("sglang_engine_common.context_length", 524288, 3840)]


def test_an_slo_labels_each_option_and_today() -> None:
    fleet, config = multinode()
    result = plan(fleet, config, Shape(250, CALL))
    result.slo = "TTFT p90 <= 2 s"
    result.today_times = ["TTFT p90 3.1 s"]
    met = result.options[0]
    missed = Option("second", list(met.changes), fleet=met.fleet, after=met.after, rank=met.rank, meets_slo=False)
    met.meets_slo = True
    result.options[1:1] = [missed]
    lines = render(result, "multinode").splitlines()
    assert lines[0] == "want 250 parallel calls x 4,000 tokens (multinode), SLO TTFT p90 <= 2 s"
    assert lines[2:4] == ["    TTFT p90 3.1 s", "does not fit: 192 < 250"]
    assert lines[4] == "option 1: admit more calls (as asked; meets the SLO)"
    assert "option 2: second (as asked; meets memory, not the SLO)" in lines
    assert "option 3: context_length 3,840 (at 3,838 tokens per call)" in lines  # no SLO asked of it: no label


@pytest.mark.parametrize(
    ("meets", "last"),
    [
        (False, "fits in memory: 192 >= 192; but not the SLO (TTFT p90 <= 2 s)"),
        (True, "fits: 192 >= 192; nothing to change"),
        (None, "fits: 192 >= 192; nothing to change"),
    ],
    ids=["misses-the-slo", "meets-the-slo", "no-time-asked"],
)
def test_a_fleet_that_fits_in_memory_may_still_miss_the_slo(meets: bool | None, last: str) -> None:
    fleet, config = multinode()
    result = plan(fleet, config, Shape(192, CALL))
    result.slo, result.today_meets_slo = "TTFT p90 <= 2 s", meets
    assert render(result, "multinode").splitlines()[2] == last


def test_an_option_never_sized_is_an_error() -> None:
    fleet, config = multinode()
    result = plan(fleet, config, Shape(250, CALL))
    result.options[0].after = None
    with pytest.raises(PlanError, match=r"^option 'admit more calls' was never sized$"):
        render(result, "multinode")


def copies(count: int) -> list[str]:
    return [
        f"decode-01-decode{3 + i} (a copy of decode-01's decode engine, {i} of {count})" for i in range(1, count + 1)
    ]


def test_many_copies_of_one_engine_are_one_line() -> None:
    assert Option("more", added_hosts=copies(4)).diff_lines() == [
        "inventory: add hosts decode-01-decode4 .. decode-01-decode7 to group sglang_decode "
        "(4 copies of decode-01's decode engine)"
    ]
    assert Option("more", added_hosts=copies(3)).diff_lines() == [
        f"inventory: add host {h} to group sglang_decode" for h in copies(3)
    ]


def test_an_extension_keeps_the_hosts_and_the_ranking_levers_of_its_base() -> None:
    """The planner's own option (rank: not exact, hosts, recall cost, -calls, changes) with one decode host added,
    then one prefill host: both hosts are listed, and the rank keeps the base's levers after the host count."""
    fleet, config = multinode()
    base = plan(fleet, config, Shape(250, CALL)).options[0]
    assert base.rank == (False, 0, False, -4000, 2)
    more = change(base.changed_fleet(), config, "one more decode host", [], add_decode_hosts=1)
    more.rank = base.rank
    out = extend(more, config, Shape(250, CALL), "add 1 prefill host", [], add_prefill_hosts=1)
    assert out.added_hosts == [
        "decode-01-decode4 (a copy of decode-01's decode engine, 1 of 1)",
        "prefill-01-prefill3 (a copy of prefill-01's prefill engine, 1 of 1)",
    ]
    assert out.rank == (False, 2, False, -4000, 2)


def test_an_added_host_is_a_copy_reached_at_its_own_address() -> None:
    fleet, config = multinode()
    fleet.hostvars["decode-01"].update(ansible_host="10.0.0.7", sglang_advertise_host="10.0.0.7")
    option = change(fleet, config, "one more decode host", [], add_decode_hosts=1)
    new = option.changed_fleet().hostvars["decode-01-decode4"]
    assert new["inventory_hostname"] == "decode-01-decode4"
    assert "ansible_host" not in new and "sglang_advertise_host" not in new
    assert fleet.hostvars["decode-01"]["ansible_host"] == "10.0.0.7"  # the template is not touched


# ---------------------------------------------------------------- which variable a change edits


def test_a_decode_only_change_to_a_shared_key_leaves_the_prefill_engines_as_they_are() -> None:
    """An inventory that keeps max_running_requests 64 in sglang_engine_common for both roles: admitting 301 calls
    raises the decode slots to ceil(301 / 3) = 101 in sglang_decode, and the prefill engines keep 64. Lowering the
    context for a shape that does not fit is set for both roles alike, so it stays in the shared dict."""
    fleet, config = multinode()
    for hv in fleet.hostvars.values():
        common = dict(hv["sglang_engine_common"], max_running_requests=64)
        hv["sglang_engine_common"] = common
        for role in ("sglang_prefill", "sglang_decode"):
            hv[role] = {k: v for k, v in hv[role].items() if k != "max_running_requests"}
    first = answers(fleet, config, 301)[0]
    assert first.changes[0] == ("sglang_decode.max_running_requests", 64, 101)
    changed = first.changed_fleet()
    for role, slots in (("prefill", 64), ("decode", 101)):
        found = {engine_envelope(role, changed.hostvars[h])["max_running_requests"] for h in changed.hosts(role)}
        assert found == {slots}, role


def test_the_fp8_index_key_option_turns_the_bf16_keys_off_on_every_engine_host() -> None:
    # multinode: the prefill and the decode engines run on hosts of their own, each reading sglang_engine_common
    from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_plan import _variant

    fleet, _config = multinode()
    option = _variant(fleet, 1, fp8=True, fraction=None, extra=0)
    assert option.fleet is not None
    seen = {(role, host): engine_envelope(role, option.fleet.hostvars[host])["bf16_index_k"]
            for role in ("prefill", "decode") for host in option.fleet.hosts(role)}  # fmt: skip
    assert len(seen) == 5 and set(seen.values()) == {False}
    assert option.changes == [("sglang_engine_common.bf16_index_k", True, False)]
    assert option.title == "fp8 index keys"
    assert option.caveats == ["fp8 index keys lose long-context recall (needles beyond about 2,000 tokens are missed)"]


def test_a_memory_fraction_option_says_what_it_leaves_outside_the_pool() -> None:
    # 141 GiB per H200; a static pool of 0.8 of it leaves 141 * 0.2 = 28.2 GiB per GPU
    from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_plan import _variant

    fleet, _config = multinode()
    option = _variant(fleet, 1, fp8=False, fraction=0.8, extra=0)
    assert option.title == "decode mem_fraction_static 0.8 (SGLang's own choice on this GPU)"
    assert option.caveats == [
        "leaves 28.2 GiB per GPU outside the static pool for activations and cuda graphs (SGLang's own default reserve)"
    ]


@pytest.mark.parametrize(
    ("tp_size", "fraction"),
    [
        # SGLang's memory hook below 60 GiB: reserved = 512 + 1.5 x activation tokens + tp / 8 x 1024 MiB, the
        # activation tokens a decode engine's max_running_requests (3,000); 40 GiB is 40,960 MiB
        (8, 0.853),  # 512 + 4,500 + 1,024 = 6,036 -> 34,924 / 40,960 = 0.8526
        (None, 0.875),  # tp_size unset counts as 1: 512 + 4,500 + 128 = 5,140 -> 35,820 / 40,960 = 0.8745
    ],
)
def test_the_safe_fraction_is_sglangs_default_for_the_decode_engine(tp_size: int | None, fraction: float) -> None:
    from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_plan import _safe_fraction

    fleet, _config = multinode()
    hv = fleet.hostvars[fleet.hosts("decode")[0]]
    hv["sglang_gpu_memory_gib"] = 40
    hv["sglang_decode"] = {**(hv.get("sglang_decode") or {}), "max_running_requests": 3000}
    common = {k: v for k, v in hv["sglang_engine_common"].items() if k != "tp_size"}
    hv["sglang_engine_common"] = common if tp_size is None else {**common, "tp_size": tp_size}
    assert _safe_fraction(fleet) == fraction


def test_a_lab_reached_at_loopback_advertises_its_inventory_name_once_it_has_company() -> None:
    """The lab's host is reached at 127.0.0.1 (ansible_host) and advertises 127.0.0.1: a host added to it must reach
    it elsewhere, so the option advertises the inventory name in sglang_advertise_host, which comes before ansible_host
    when peers pick an address; without it the loopback ansible_host would still be advertised."""
    hostvars, groups = shipped_inventory("lab")
    hostvars = {h: dict(v) for h, v in hostvars.items()}
    host = next(iter(hostvars))
    common = dict(hostvars[host]["sglang_engine_common"], host="127.0.0.1")  # as Ansible renders the lab's template
    hostvars[host].update(ansible_host="127.0.0.1", sglang_engine_common=common)
    fleet = Fleet(hostvars, groups)
    config = model_config_for(hostvars[host])
    first = plan(fleet, config, Shape(2 * fleet_fit(fleet, config, 200_000).parallel, 200_000)).options[0]
    assert first.added_hosts == [f"{host}-decode2 (a copy of {host}'s decode engine, 1 of 1)"]
    assert (f"{host}: sglang_advertise_host", "127.0.0.1", f"{host} (an address the new hosts reach)") in first.changes
    assert first.fleet is not None and first.fleet.hostvars[host]["sglang_advertise_host"] == host
    assert first.refused == []


# ---------------------------------------------------------------- changes SGLang could not start, and the full context


def test_a_change_sglang_could_not_start_is_refused_and_more_decode_hosts_are_tried() -> None:
    """40,000 calls of 4,000 tokens: 13,334 running requests on each of the three decode engines leave their KV pool
    no memory (SGLang's own start-up check refuses it), so that option is refused with SGLang's words, and the
    running requests are spread over more decode hosts: 17 engines run ceil(40,000 / 17) = 2,353 each, 19 engines
    ceil(40,000 / 19) = 2,106; each router admits all 40,000."""
    fleet, config = multinode()
    result = plan(fleet, config, Shape(40_000, CALL))
    no_memory = (
        "Not enough memory. Please try to increase --mem-fraction-static (mem_fraction_static=0.83, KV budget "
        "-49.17 GiB); fix: raise mem_fraction_static or lower max_running_requests"
    )
    assert result.refused == [
        "admit more calls (sglang_decode.max_running_requests 13334, sglang_router.max_concurrent_requests 40000): "
        + no_memory,
        "fp8 index keys (sglang_engine_common.bf16_index_k False, sglang_decode.max_running_requests 13334, "
        "sglang_router.max_concurrent_requests 40000): " + no_memory,
    ]
    fraction = "decode mem_fraction_static 0.929 (SGLang's own choice on this GPU)"
    assert [(o.title, len(o.added_hosts), o.changes[-2:]) for o in result.options] == [
        (
            f"add 14 decode hosts, {fraction}, fp8 index keys",
            14,
            [("sglang_decode.max_running_requests", 64, 2353), ("sglang_router.max_concurrent_requests", 192, 40_000)],
        ),
        (
            f"add 16 decode hosts, {fraction}",
            16,
            [("sglang_decode.max_running_requests", 64, 2106), ("sglang_router.max_concurrent_requests", 192, 40_000)],
        ),
    ]
    assert all(o.after is not None and o.after.parallel == 40_000 for o in result.options)


def test_calls_longer_than_any_context_the_kv_pools_hold_get_the_longest_context_that_runs_them() -> None:
    """200 calls at the full context (524,288 tokens) do not fit; each option that lowers context_length names the
    longest page-aligned context (a multiple of 256) at which 200 calls run, with the decode slots raised to
    ceil(200 / 3) = 67 and the router to 200. The contexts are the capacity model's (held to SGLang by
    tests/component/conformance)."""
    fleet, config = multinode()
    result = plan(fleet, config, Shape(200, 524_288))
    fraction = "decode mem_fraction_static 0.929 (SGLang's own choice on this GPU)"
    assert result.options == []
    assert [(o.title, o.changes[-1], o.caveats[-1]) for o in result.shorter] == [
        (f"context_length {c:,}{rest}", ("sglang_engine_common.context_length", 524_288, c),
         f"calls longer than {c - 2:,} tokens are cut short or refused (the shape asked for 524,288)")
        for c, rest in (
            (194_560, f", {fraction}"),
            (165_888, ""),
            (212_480, f", {fraction}, fp8 index keys"),
            (181_248, ", fp8 index keys"),
        )
    ]  # fmt: skip
    assert all(o.after is not None and o.after.parallel == 200 for o in result.shorter)


def test_calls_as_long_as_the_declared_context_are_served_two_tokens_shorter_as_declared() -> None:
    """SGLang serves a call of at most context_length - 2 tokens: 10 calls of 524,288 tokens (the declared context)
    fit nowhere, and the first shorter answer is the declaration as it is, at 524,286 tokens per call (21 of them fit
    the production decode pool). No option was refused, so the text points at none."""
    hostvars, groups = shipped_inventory("production")
    fleet = Fleet({h: dict(v) for h, v in hostvars.items()}, groups)
    config = model_config_for(hostvars[fleet.hosts("decode")[0]])
    result = plan(fleet, config, Shape(10, 524_288))
    assert (result.options, result.refused) == ([], [])
    first = result.shorter[0]
    assert (first.title, first.changes, first.exact) == ("as declared", [], False)
    assert first.after is not None and first.after.parallel == 21
    assert first.caveats == ["calls longer than 524,286 tokens are cut short or refused (the shape asked for 524,288)"]
    lines = render(result, "production").splitlines()
    assert lines[3:5] == [
        "no option within the planner's levers fits",
        "if shorter calls are acceptable (these do not serve calls of 524,288 tokens; SGLang refuses or cuts them "
        "short):",
    ]
    assert lines[5] == "option 1: as declared (at 524,286 tokens per call)"


def test_the_context_search_goes_down_to_a_single_page() -> None:
    """15,000 calls of 4,000 tokens: DeepSeek-V4's compress-state rings, which SGLang keeps for each of 5,000 running
    requests per decode engine, leave the KV pool room for calls of one 256-token page only, unless the decode static
    pool grows to SGLang's own fraction (two pages), or with fp8 index keys as well (three)."""
    fleet, config = multinode()
    result = plan(fleet, config, Shape(15_000, CALL))
    fraction = "decode mem_fraction_static 0.929 (SGLang's own choice on this GPU)"
    assert [o.title for o in result.shorter] == [
        f"context_length 512, {fraction}",
        "context_length 256",
        f"context_length 768, {fraction}, fp8 index keys",
        "context_length 256, fp8 index keys",
    ]
    assert [o.title for o in result.options] == [f"add 4 decode hosts, {fraction}"]


# ---------------------------------------------------------------- which levers the planner tries


def with_decode(fleet: Fleet, **values: Any) -> Fleet:
    """`fleet` with `values` in every decode host's sglang_decode; a value of None removes the key."""
    for host in fleet.hosts("decode"):
        own = {**fleet.hostvars[host]["sglang_decode"], **values}
        fleet.hostvars[host] = {
            **fleet.hostvars[host],
            "sglang_decode": {k: v for k, v in own.items() if v is not None},
        }
    return fleet


FRACTION = "decode mem_fraction_static 0.929 (SGLang's own choice on this GPU)"


@pytest.mark.parametrize(
    ("decode", "titles"),
    [
        ({}, ["", f", {FRACTION}", ", fp8 index keys", f", {FRACTION}, fp8 index keys"]),
        # no declared fraction: SGLang picks its own already; one at or above its own choice is not raised
        ({"mem_fraction_static": None}, ["", ", fp8 index keys"]),
        ({"mem_fraction_static": 0.929}, ["", ", fp8 index keys"]),
        ({"mem_fraction_static": 0.95}, ["", ", fp8 index keys"]),
        ({"mem_fraction_static": 0.928}, ["", ", decode mem_fraction_static 0.929 (SGLang's own choice on this GPU)",
                                          ", fp8 index keys", f", {FRACTION}, fp8 index keys"]),
    ],
    ids=["both-levers", "no-fraction-declared", "fraction-at-safe", "fraction-above-safe", "fraction-below-safe"],
)  # fmt: skip
def test_the_planner_tries_a_lever_only_where_it_changes_the_declaration(
    decode: dict[str, Any], titles: list[str]
) -> None:
    """300 calls of 4,000 tokens: each lever tried shows as a shorter answer at 15 pages (3,840 tokens), the longest
    context below the asked 4,000; SGLang's own fraction on an H200 decode engine of 64 running requests is 0.929."""
    fleet, config = multinode()
    result = plan(with_decode(fleet, **decode), config, Shape(300, CALL))
    assert [o.title for o in result.shorter] == [f"context_length 3,840{t}" for t in titles]


def test_fleet_on_fp8_index_keys_already_is_offered_no_recall_lever() -> None:
    fleet, config = multinode()
    for host in fleet.hosts("prefill") + fleet.hosts("decode"):
        hv = fleet.hostvars[host]
        fleet.hostvars[host] = {**hv, "sglang_engine_common": {**hv["sglang_engine_common"], "bf16_index_k": False}}
    result = plan(fleet, config, Shape(300, CALL))
    assert [o.title for o in result.shorter] == ["context_length 3,840", f"context_length 3,840, {FRACTION}"]


def test_the_fp8_option_edits_each_role_s_own_dict_where_the_key_is_declared_there() -> None:
    """bf16_index_k declared in sglang_prefill and sglang_decode instead of the shared dict: the option edits those."""
    fleet, _config = multinode()
    for host in fleet.hosts("prefill") + fleet.hosts("decode"):
        hv = fleet.hostvars[host]
        role = "prefill" if host in fleet.hosts("prefill") else "decode"
        common = {k: v for k, v in hv["sglang_engine_common"].items() if k != "bf16_index_k"}
        fleet.hostvars[host] = {**hv, "sglang_engine_common": common,
                                f"sglang_{role}": {**hv[f"sglang_{role}"], "bf16_index_k": True}}  # fmt: skip
    from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_plan import _variant

    option = _variant(fleet, 1, fp8=True, fraction=None, extra=0)
    assert option.changes == [("sglang_decode.bf16_index_k", True, False), ("sglang_prefill.bf16_index_k", True, False)]


def test_every_option_the_validation_refuses_is_listed_with_its_first_problem() -> None:
    """A router queue_size of -3, which no lever of the planner touches: every option keeps it, so each is refused
    with that problem and none is offered."""
    fleet, config = multinode()
    router = fleet.hostvars["router-01"]
    fleet.hostvars["router-01"] = {**router, "sglang_router": {**router["sglang_router"], "queue_size": -3}}
    result = plan(fleet, config, Shape(300, CALL))
    problem = (
        "router-01: sglang_router.queue_size=-3: must be >= 0 (0: refuse with 429 when full) "
        "[router.queue_size_non_negative]; fix: e.g. 256"
    )
    titles = [
        "admit more calls",
        "context_length 3,840",
        FRACTION,
        f"context_length 3,840, {FRACTION}",
        "fp8 index keys",
        "context_length 3,840, fp8 index keys",
        f"{FRACTION}, fp8 index keys",
        f"context_length 3,840, {FRACTION}, fp8 index keys",
    ]
    assert result.refused == [f"{t}: {problem}" for t in titles]
    assert (result.options, result.shorter) == ([], [])


def test_the_fleet_answer_names_each_decode_engine_by_its_host() -> None:
    fleet, config = multinode()
    memory = fleet_answer(fleet, config, CALL).memory
    assert [(c.host, c.role, c.per_rank) for c in memory.decode] == [
        ("decode-01", "decode", 64),
        ("decode-02", "decode", 64),
        ("decode-03", "decode", 64),
    ]


def test_an_option_without_a_changed_fleet_says_so() -> None:
    with pytest.raises(PlanError, match=r"^option 'lone' has no changed fleet$"):
        Option("lone").changed_fleet()


def test_of_two_options_that_cost_recall_and_no_host_only_the_first_is_kept() -> None:
    """Decode engines declared at mem_fraction_static 0.92, just below SGLang's own 0.929: 75 calls of 524,286
    tokens need fp8 index keys (72 fit as declared or at 0.929, 78 with fp8 keys, 81 with both). fp8 keys with the
    fraction as well cost the same recall and no fewer hosts, so only fp8 keys alone is offered, beside one more
    decode host (no recall cost)."""
    fleet, config = multinode()
    result = plan(with_decode(fleet, mem_fraction_static=0.92), config, Shape(75, 524_286))
    assert [(o.title, o.rank[:3]) for o in result.options] == [
        ("fp8 index keys", (False, 0, True)),
        ("add 1 decode host", (False, 1, False)),
    ]
