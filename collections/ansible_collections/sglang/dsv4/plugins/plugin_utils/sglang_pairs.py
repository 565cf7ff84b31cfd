"""PD pair consistency: what a prefill engine and the decode engines it hands requests to must agree on.

smg pairs any prefill with any decode of the fleet, so every (prefill, decode) pair is checked. No single engine
can see these contradictions; SGLang finds them only when the first request crosses the pair. Each rule, and
where SGLang 0.5.23 enforces it (sglang/srt/disaggregation/):
- page size and KV cache dtype: the decode fetches the prefill's server info at the first bootstrap and raises
  "Page size mismatch" / "KV cache dtype mismatch" (common/conn.py, try_ensure_parallel_info). DeepSeek-V4
  forces page_size 256 and resolves kv_cache_dtype auto to fp8_e4m3 (arg_groups/deepseek_v4_hook.py).
- KV layout: the same check raises "KV layout mismatch ... must use the same --dsv4-attn-backend and
  SGLANG_DSV4_KV_LAYOUT" (the layout comes from the pool: mem_cache/deepseek_v4_memory_pool.py pd_kv_layout).
- bf16 index keys (SGLANG_DSV4_BF16_INDEX_K): they double the indexer state's bytes per token, and the transfer
  refuses paired state items of different lengths ("item length mismatch", mooncake/conn.py).
- transfer backend: each side builds its KV manager from its own --disaggregation-transfer-backend
  (managers/disagg_service.py); mooncake, nixl and mori do not speak to each other, and mooncake_tcp is mooncake
  forced onto TCP (MC_FORCE_TCP, arg_groups/pd_disaggregation_hook.py), which an RDMA peer cannot reach.
- IB devices: with an RDMA backend, one side pinned to IB devices and the other auto-discovering (SGLang warns
  "falling back to auto discovery", arg_groups/validation_hook.py validate_ib_devices) may pick NICs that do not
  reach each other; declare them on both sides or on neither.
- context length: a request the prefill accepts (up to its context_length) must fit the decode's.
- model path and served model name: the router sends one request to both halves of a pair.
- router timing: a prefill aborts a request whose decode has not bootstrapped within
  SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT (default 300 s; common/conn.py _check_bootstrap_timeout), and smg
  holds the decode leg up to --pd-admission-wait-secs (default 30 s) waiting for a slot in the decode's running
  window; the wait must end before that deadline. A request timeout at or under the admission wait cuts every
  request that waits its full admission time.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_argspec import SGLANG, SMG
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_capacity import is_dsv4, model_context_len
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_declared import (
    GROUPS,
    declared_var,
    engine_envelope,
    router_envelope,
)
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_schema import EnvelopeError

from .sglang_rules import NO_VALUE, Finding, Rule, run

BOOTSTRAP_TIMEOUT_ENV = "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT"
BOOTSTRAP_TIMEOUT_DEFAULT = 300  # sglang/srt/environ.py (SGLang 0.5.23)
KV_LAYOUT_ENV = "SGLANG_DSV4_KV_LAYOUT"
RDMA_BACKENDS = ("mooncake", "nixl", "mori")
BACKEND = "disaggregation_transfer_backend"


class Side:
    """One engine of a pair: its effective values and the declared variable behind each."""

    def __init__(self, host: str, role: str, hostvars: Mapping[str, Any], model_config: Mapping[str, Any]) -> None:
        self.host, self.role, self.hostvars = host, role, hostvars
        self.env = engine_envelope(role, hostvars)
        self.extra_env = {str(k): str(v) for k, v in (hostvars.get("sglang_engine_extra_env") or {}).items()}
        dsv4 = is_dsv4(model_config)
        kv = self.env.get("kv_cache_dtype")
        self.values: dict[str, Any] = {
            "kv_cache_dtype": kv if kv not in (None, "auto") else ("fp8_e4m3" if dsv4 else "auto"),
            "page_size": 256 if dsv4 else int(self.env.get("page_size") or 1),
            "bf16_index_k": bool(self.env.get("bf16_index_k")),
            "disaggregation_transfer_backend": self.env.get("disaggregation_transfer_backend")
            or SGLANG["disaggregation_transfer_backend"].default,
            "disaggregation_ib_device": self.env.get("disaggregation_ib_device"),
            "context_length": int(self.env.get("context_length") or model_context_len(model_config)),
            "model_path": self.env.get("model_path"),
            "served_model_name": self.env.get("served_model_name") or self.env.get("model_path"),
        }

    def var(self, key: str) -> str:
        return f"{self.host}: {declared_var(self.role, self.hostvars, key)}"

    def env_var(self, name: str) -> str:
        return f"{self.host}: sglang_engine_extra_env.{name}"

    def shown(self, key: str) -> str:
        declared = self.env.get(key)
        value = self.values[key]
        return f"={value!r}" if declared is not None or key == "context_length" else f" (unset: {value!r})"


@dataclass(frozen=True)
class Pair:
    """One prefill engine and one decode engine smg may pair."""

    p: Side
    d: Side

    def finding(self, key: str, rule: str, fix: str) -> Finding:
        p, d = self.p, self.d
        return Finding(f"{p.var(key)}{p.shown(key)} and {d.var(key)}{d.shown(key)}", NO_VALUE, rule, fix)

    def differ(self, key: str) -> bool:
        return bool(self.p.values[key] != self.d.values[key])


def _mismatch(key: str, what: str, c: Pair) -> Iterator[Finding]:
    if c.differ(key):
        yield c.finding(
            key,
            f"a PD pair must share it; SGLang's decode raises '{what} mismatch' at the first request "
            "(disaggregation/common/conn.py)",
            f"declare the same {key} for both, best once in sglang_engine_common",
        )


def _page_size(c: Pair) -> Iterator[Finding]:
    yield from _mismatch("page_size", "Page size", c)


def _kv_cache_dtype(c: Pair) -> Iterator[Finding]:
    yield from _mismatch("kv_cache_dtype", "KV cache dtype", c)


def _kv_layout(c: Pair) -> Iterator[Finding]:
    p_layout, d_layout = c.p.extra_env.get(KV_LAYOUT_ENV), c.d.extra_env.get(KV_LAYOUT_ENV)
    if p_layout != d_layout:
        yield Finding(
            f"{c.p.env_var(KV_LAYOUT_ENV)}={p_layout!r} and {c.d.env_var(KV_LAYOUT_ENV)}={d_layout!r}",
            NO_VALUE,
            "the KV layout of a PD pair must match; SGLang's decode raises 'KV layout mismatch' at the first request",
            "set the same SGLANG_DSV4_KV_LAYOUT on both engines, or on neither",
        )


def _bf16_index_k(c: Pair) -> Iterator[Finding]:
    if c.differ("bf16_index_k"):
        yield c.finding(
            "bf16_index_k",
            "bf16 index keys (SGLANG_DSV4_BF16_INDEX_K) double the indexer state per token on one side only, "
            "and the KV transfer refuses paired state items of different lengths",
            "declare bf16_index_k once in sglang_engine_common",
        )


def _transfer_backend(c: Pair) -> Iterator[Finding]:
    if c.differ(BACKEND):
        yield c.finding(
            BACKEND,
            "both halves of a pair must use the same KV transfer backend (mooncake_tcp is mooncake forced onto "
            "TCP, which an RDMA peer does not reach)",
            f"declare the same {BACKEND} for both, best once in sglang_engine_common",
        )


def _ib_device(c: Pair) -> Iterator[Finding]:
    pinned = (c.p.values["disaggregation_ib_device"] is None) != (c.d.values["disaggregation_ib_device"] is None)
    if not c.differ(BACKEND) and c.p.values[BACKEND] in RDMA_BACKENDS and pinned:
        yield c.finding(
            "disaggregation_ib_device",
            f"one side is pinned to IB devices and the other auto-discovers them ({c.p.values[BACKEND]} over "
            "RDMA), so the pair may pick NICs that do not reach each other",
            "declare disaggregation_ib_device on both engines or on neither",
        )


def _context_length(c: Pair) -> Iterator[Finding]:
    if c.d.values["context_length"] < c.p.values["context_length"]:
        yield c.finding(
            "context_length",
            "the decode must accept every request the prefill accepts, and requests longer than the decode's "
            "context_length are prefilled and then refused",
            f"raise the decode's context_length to >= {c.p.values['context_length']} or lower the prefill's",
        )


def _same_model(key: str, c: Pair) -> Iterator[Finding]:
    if c.differ(key):
        yield c.finding(
            key,
            "the router sends each request to both halves of a pair, which must serve the same model "
            "under the same name",
            "declare one sglang_model for the whole fleet",
        )


def _model_path(c: Pair) -> Iterator[Finding]:
    yield from _same_model("model_path", c)


def _served_model_name(c: Pair) -> Iterator[Finding]:
    yield from _same_model("served_model_name", c)


@dataclass(frozen=True)
class Timing:
    """A router and the prefill engines whose bootstrap deadline its admission wait must beat."""

    host: str
    router: Mapping[str, Any]
    prefills: list[Side]

    @property
    def wait(self) -> int:
        wait = self.router.get("pd_admission_wait_secs")
        return int(wait if wait is not None else SMG["pd_admission_wait_secs"].default)

    @property
    def wait_var(self) -> str:
        wait = self.router.get("pd_admission_wait_secs")
        shown = f"={wait!r}" if wait is not None else f" (unset: smg's default {self.wait})"
        return f"{self.host}: sglang_router.pd_admission_wait_secs{shown}"


def _wait_within_bootstrap(c: Timing) -> Iterator[Finding]:
    for p in c.prefills:
        raw = p.extra_env.get(BOOTSTRAP_TIMEOUT_ENV)
        deadline = int(raw) if raw is not None and raw.lstrip("-").isdigit() else BOOTSTRAP_TIMEOUT_DEFAULT
        shown = f"={raw!r}" if raw is not None else f" (unset: SGLang's default {BOOTSTRAP_TIMEOUT_DEFAULT})"
        if c.wait >= deadline:
            yield Finding(
                f"{c.wait_var} and {p.env_var(BOOTSTRAP_TIMEOUT_ENV)}{shown}",
                NO_VALUE,
                "smg holds a request's decode leg up to the admission wait while the prefill aborts it after "
                f"{deadline} s without a decode bootstrap (SGLang's bootstrap timeout), so a full wait always fails",
                f"keep pd_admission_wait_secs well under {deadline} (smg's default is 30) or raise "
                f"{BOOTSTRAP_TIMEOUT_ENV} on the prefill engines",
            )


def _timeout_above_wait(c: Timing) -> Iterator[Finding]:
    timeout = c.router.get("request_timeout_secs")
    timeout_value = int(timeout if timeout is not None else SMG["request_timeout_secs"].default)
    if 0 < timeout_value <= c.wait:
        yield Finding(
            f"{c.wait_var} and {c.host}: sglang_router.request_timeout_secs={timeout_value!r}",
            NO_VALUE,
            "a request that waits its full admission time is cut by the request timeout before it runs",
            "keep pd_admission_wait_secs well under request_timeout_secs",
        )


def _same(key: str) -> tuple[str, ...]:
    return (f"sglang_prefill.{key}", f"sglang_decode.{key}")


PAIR_RULES: tuple[Rule, ...] = (
    Rule(
        "pair.page_size",
        1,
        _same("page_size"),
        "a PD pair shares its page size (SGLang's decode raises 'Page size mismatch'; DeepSeek-V4 forces 256)",
        "declare the same page_size for both, best once in sglang_engine_common",
        _page_size,
    ),
    Rule(
        "pair.kv_cache_dtype",
        1,
        _same("kv_cache_dtype"),
        "a PD pair shares its KV cache dtype (SGLang's decode raises 'KV cache dtype mismatch')",
        "declare the same kv_cache_dtype for both, best once in sglang_engine_common",
        _kv_cache_dtype,
    ),
    Rule(
        "pair.kv_layout",
        1,
        (f"sglang_engine_extra_env.{KV_LAYOUT_ENV}",),
        "a PD pair shares its KV layout (SGLang's decode raises 'KV layout mismatch')",
        "set the same SGLANG_DSV4_KV_LAYOUT on both engines, or on neither",
        _kv_layout,
    ),
    Rule(
        "pair.bf16_index_k",
        1,
        _same("bf16_index_k"),
        "bf16 index keys on one side only give paired state items of different lengths, which the transfer refuses",
        "declare bf16_index_k once in sglang_engine_common",
        _bf16_index_k,
    ),
    Rule(
        "pair.transfer_backend",
        1,
        _same(BACKEND),
        "both halves of a pair use the same KV transfer backend",
        "declare the same disaggregation_transfer_backend for both, best once in sglang_engine_common",
        _transfer_backend,
    ),
    Rule(
        "pair.ib_device",
        1,
        (*_same("disaggregation_ib_device"), *_same(BACKEND)),
        "over RDMA, IB devices are pinned on both halves of a pair or on neither",
        "declare disaggregation_ib_device on both engines or on neither",
        _ib_device,
    ),
    Rule(
        "pair.context_length",
        1,
        _same("context_length"),
        "the decode accepts every request the prefill accepts (its context_length is at least the prefill's)",
        "raise the decode's context_length or lower the prefill's",
        _context_length,
    ),
    Rule(
        "pair.model_path",
        1,
        _same("model_path"),
        "both halves of a pair serve the same model",
        "declare one sglang_model for the whole fleet",
        _model_path,
    ),
    Rule(
        "pair.served_model_name",
        1,
        _same("served_model_name"),
        "both halves of a pair serve the model under the same name",
        "declare one sglang_model for the whole fleet",
        _served_model_name,
    ),
)
TIMING_RULES: tuple[Rule, ...] = (
    Rule(
        "pair.admission_wait_within_bootstrap",
        1,
        ("sglang_router.pd_admission_wait_secs", f"sglang_engine_extra_env.{BOOTSTRAP_TIMEOUT_ENV}"),
        "smg's admission wait ends before the prefill's bootstrap timeout (SGLang's default 300 s)",
        "keep pd_admission_wait_secs well under the bootstrap timeout or raise it on the prefill engines",
        _wait_within_bootstrap,
    ),
    Rule(
        "pair.request_timeout_above_wait",
        1,
        ("sglang_router.pd_admission_wait_secs", "sglang_router.request_timeout_secs"),
        "a request that waits its full admission time still has time to run before the request timeout",
        "keep pd_admission_wait_secs well under request_timeout_secs",
        _timeout_above_wait,
    ),
)


def pair_problems(p: Side, d: Side) -> list[str]:
    """What one prefill and one decode engine disagree on (PAIR_RULES)."""
    return run(PAIR_RULES, Pair(p, d))


def timing_problems(router_host: str, router: Mapping[str, Any], prefills: list[Side]) -> list[str]:
    """The router's admission wait and request timeout against the prefill engines' bootstrap deadline
    (TIMING_RULES)."""
    return run(TIMING_RULES, Timing(router_host, router, prefills))


def fleet_pair_problems(
    all_hostvars: Mapping[str, Mapping[str, Any]], groups: Mapping[str, list[str]], model_config: Mapping[str, Any]
) -> list[str]:
    """Every pair and router-timing problem of the inventory (engines whose envelope cannot be built are left
    to the single-engine checks, which report why)."""
    sides: dict[str, list[Side]] = {"prefill": [], "decode": []}
    for role in sides:
        for host in groups.get(GROUPS[role], []):
            try:
                sides[role].append(Side(host, role, all_hostvars[host], model_config))
            except (EnvelopeError, TypeError, ValueError):
                continue
    errors: list[str] = []
    for p in sides["prefill"]:
        for d in sides["decode"]:
            errors += pair_problems(p, d)
    for host in groups.get(GROUPS["router"], []):
        try:
            router = router_envelope(all_hostvars[host])
        except EnvelopeError:
            continue
        errors += timing_problems(host, router, sides["prefill"])
    return errors
