"""The planner's shapes, changes and text (plugins/plugin_utils/sglang_plan.py), pinned word for word on small synthetic
fits, plans and rollout steps, and on a synthetic fleet of one prefill, one decode and one router host."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_plan
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_plan import (
    Fit,
    Fleet,
    Option,
    Plan,
    PlanError,
    Shape,
    Step,
    change,
    describe_fit,
    parse_shape,
    render,
    render_plan,
    rollout_plan,
    rollout_shortfalls,
)

REPO = Path(__file__).resolve().parents[2]
SHARED = yaml.safe_load((REPO / "group_vars" / "all" / "envelope.yml").read_text())
SHARED["sglang_engine_common"]["host"] = "0.0.0.0"


def synthetic_fleet(groups: dict[str, list[str]] | None = None) -> Fleet:
    """Synthetic fleet: every host declares the shared envelope."""
    groups = groups or {"sglang_prefill": ["p1"], "sglang_decode": ["d1"], "sglang_router": ["r1"]}
    hosts = {h for members in groups.values() for h in members}
    return Fleet({h: copy.deepcopy(SHARED) for h in sorted(hosts)}, copy.deepcopy(groups))


def fit(parallel: int = 3, router_cap: int | None = None, tokens: int = 1000, context: int = 65536) -> Fit:
    """A synthetic fit."""
    return Fit(
        tokens=tokens,
        parallel=parallel,
        binding="decode KV pools",
        decode_engines=2,
        decode_pool_tokens=12345,
        decode_running=7,
        context_length=context,
        router_cap=router_cap,
    )


# ---------------------------------------------------------------- parse_shape


def test_the_smallest_shapes_parse() -> None:
    assert parse_shape("1x5") == Shape(1, 5)
    assert parse_shape("2x1") == Shape(2, 1)


@pytest.mark.parametrize("text", ["0x5", "2x0"])
def test_zero_calls_or_tokens_are_refused(text: str) -> None:
    with pytest.raises(PlanError) as err:
        parse_shape(text)
    assert str(err.value) == f"--want {text!r}: calls and tokens must be > 0"


# ---------------------------------------------------------------- describe_fit, render


def test_describe_fit_without_and_with_a_router_cap() -> None:
    assert describe_fit(fit()) == (
        "3 at once, bound by decode KV pools (decode: 2 engine(s), 12,345 KV tokens, 7 running requests; "
        "router admits no cap; per-call context 65,536)"
    )
    assert describe_fit(fit(router_cap=5)) == (
        "3 at once, bound by decode KV pools (decode: 2 engine(s), 12,345 KV tokens, 7 running requests; "
        "router admits 5; per-call context 65,536)"
    )


def test_render_without_options_points_at_the_refused_ones() -> None:
    result = Plan(Shape(4, 1000), fit(), [], refused=["more hosts: synthetic problem"])
    assert render(result, "synthetic") == (
        "want 4 parallel calls x 1,000 tokens (synthetic)\n"
        "today: 3 at once, bound by decode KV pools (decode: 2 engine(s), 12,345 KV tokens, 7 running requests; "
        "router admits no cap; per-call context 65,536)\n"
        "does not fit: 3 < 4\n"
        "no option within the planner's levers fits; see the refused options below\n"
        "refused by validation: more hosts: synthetic problem\n"
    )


def test_render_names_the_scope_of_each_option() -> None:
    exact = Option(
        "add 1 decode host",
        changes=[("sglang_router.max_concurrent_requests", 3, 4)],
        added_hosts=["d1-decode2 (a copy of d1's decode engine, 1 of 1)"],
        after=fit(parallel=6, router_cap=4),
    )
    lowered = Option(
        "context_length 512",
        changes=[("sglang_decode.context_length", 1024, 512)],
        caveats=["synthetic caveat"],
        exact=False,
        after=fit(parallel=4, tokens=512, context=512),
    )
    result = Plan(Shape(4, 1000), fit(), [exact, lowered])
    assert render(result, "synthetic").splitlines()[3:] == [
        "option 1: add 1 decode host (as asked)",
        "    inventory: add host d1-decode2 (a copy of d1's decode engine, 1 of 1) to group sglang_decode",
        "    sglang_router.max_concurrent_requests: 3 -> 4",
        "    before -> after: 3 -> 6 at once; decode KV tokens 12,345 -> 12,345; decode running requests 7 -> 7; "
        "router None -> 4; per-call context 65,536 -> 65,536",
        "if shorter calls are acceptable (these do not serve calls of 1,000 tokens; SGLang refuses or cuts them "
        "short):",
        "option 2: context_length 512 (at 512 tokens per call)",
        "    sglang_decode.context_length: 1024 -> 512",
        "    before -> after: 3 -> 4 at once; decode KV tokens 12,345 -> 12,345; decode running requests 7 -> 7; "
        "router None -> None; per-call context 65,536 -> 512",
        "    caveat: synthetic caveat",
    ]


# ---------------------------------------------------------------- change


def test_a_change_adds_no_host_unless_asked(dsv4: dict[str, Any]) -> None:
    fleet = synthetic_fleet()
    option = change(fleet, dsv4, "synthetic", [("decode", "max_running_requests", 32)])
    assert option.title == "synthetic"
    assert option.added_hosts == []
    assert option.changes == [("sglang_decode.max_running_requests", 64, 32)]
    assert option.fleet is not None
    assert option.fleet.hosts("decode") == ["d1"]
    assert option.fleet.hostvars["d1"]["sglang_decode"]["max_running_requests"] == 32
    assert fleet.hostvars["d1"]["sglang_decode"]["max_running_requests"] == 64  # the given fleet is left as is


# ---------------------------------------------------------------- rollout_plan


def test_a_group_that_names_its_only_host_twice_gives_a_step_per_entry(dsv4: dict[str, Any]) -> None:
    fleet = synthetic_fleet({"sglang_prefill": ["p1", "p1"], "sglang_decode": ["d1"], "sglang_router": ["r1"]})
    _, steps = rollout_plan(fleet, dsv4, 8192)
    assert steps == [
        Step("p1", "prefill", 0, "no prefill engine left"),
        Step("p1", "prefill", 0, "no prefill engine left"),
        Step("d1", "decode", 0, "no decode engine left"),
    ]


def test_a_fit_the_rest_cannot_give_is_an_outage_with_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    """Synthetic fits: the whole fleet carries 10, any fleet with a server out raises."""

    def synthetic_fit(fleet: Fleet, model_config: Any, tokens: int) -> Fit:
        if len(fleet.hosts("prefill")) == 2 and len(fleet.hosts("decode")) == 2:
            return fit(parallel=10)
        raise PlanError("synthetic refusal")

    monkeypatch.setattr(sglang_plan, "fleet_fit", synthetic_fit)
    fleet = Fleet({}, {"sglang_prefill": ["p1", "p2"], "sglang_decode": ["d1", "d2"]})
    whole, steps = rollout_plan(fleet, {}, 8192)
    assert whole == 10
    assert steps == [
        Step("p1", "prefill", 0, "synthetic refusal"),
        Step("p2", "prefill", 0, "synthetic refusal"),
        Step("d1", "decode", 0, "synthetic refusal"),
        Step("d2", "decode", 0, "synthetic refusal"),
    ]


# ---------------------------------------------------------------- rollout_shortfalls, render_plan

STEPS = [
    Step("p1", "prefill", 0, "no prefill engine left"),
    Step("d1", "decode", 1, "decode KV pools"),
    Step("d2", "decode", 2, "decode max_running_requests"),
    Step("d3", "decode", 3, "decode KV pools"),
]


def test_shortfalls_name_an_outage_and_a_count() -> None:
    assert rollout_shortfalls(STEPS, 2, 8192) == [
        "prefill on p1: while it restarts the rest of the fleet carries nothing (an outage) of 8,192 tokens (no "
        "prefill engine left), below sglang_validate_rollout_min_parallel=2. Fix: add a prefill host or raise the "
        "limits of the others, or lower sglang_validate_rollout_min_parallel (0 only reports the plan)",
        "decode on d1: while it restarts the rest of the fleet carries 1 parallel calls of 8,192 tokens (decode KV "
        "pools), below sglang_validate_rollout_min_parallel=2. Fix: add a decode host or raise the limits of the "
        "others, or lower sglang_validate_rollout_min_parallel (0 only reports the plan)",
    ]


def test_render_plan_numbers_steps_from_one_and_flags_those_below_the_load() -> None:
    assert render_plan(5, STEPS, 8192, load=3) == [
        "rollout plan (one server at a time): the fleet carries 5 parallel calls of 8,192 tokens",
        "  1. prefill on p1: outage: no prefill engine left; new requests get 503 + Retry-After from the router "
        "until it is back",
        "  2. decode on d1: 1 parallel calls left (bound: decode KV pools), below the declared load of 3",
        "  3. decode on d2: 2 parallel calls left (bound: decode max_running_requests), below the declared load of 3",
        "  4. decode on d3: 3 parallel calls left (bound: decode KV pools)",
    ]
