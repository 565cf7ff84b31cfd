"""PD pair rules (plugins/plugin_utils/sglang_pairs.py): the exact text of each problem for one synthetic prefill/decode
pair built from the shared envelope, so that a changed rule, fix or shown value is seen word for word."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_pairs import Side, pair_problems

REPO = Path(__file__).resolve().parents[2]
SHARED = yaml.safe_load((REPO / "group_vars" / "all" / "envelope.yml").read_text())
SHARED["sglang_engine_common"]["host"] = "0.0.0.0"


def hostvars(**overrides: Any) -> dict[str, Any]:
    """Synthetic hostvars: the shared envelope, each override merged into its variable's dict (None deletes)."""
    hv = copy.deepcopy(SHARED)
    for var, changes in overrides.items():
        if isinstance(changes, dict):
            merged = {**hv.get(var, {}), **changes}
            hv[var] = {k: v for k, v in merged.items() if v is not None}
        else:
            hv[var] = changes
    return hv


def test_every_rule_text_of_a_disagreeing_pair(dsv4: dict[str, Any]) -> None:
    """Synthetic pair: layout, bf16 keys, IB pinning, context, served name and KV dtype all disagree."""
    p = Side(
        "p1",
        "prefill",
        hostvars(
            sglang_engine_extra_env={"SGLANG_DSV4_KV_LAYOUT": "paged"},
            sglang_prefill={"disaggregation_ib_device": "mlx5_0", "context_length": 2097152, "served_model_name": "x"},
        ),
        dsv4,
    )
    d = Side(
        "d1",
        "decode",
        hostvars(
            sglang_decode={"bf16_index_k": False, "kv_cache_dtype": "bfloat16"},
            sglang_engine_common={"context_length": None},
        ),
        dsv4,
    )
    assert pair_problems(p, d) == [
        "p1: sglang_engine_common.kv_cache_dtype='fp8_e4m3' and d1: sglang_decode.kv_cache_dtype='bfloat16': a PD pair "
        "must share it; SGLang's decode raises 'KV cache dtype mismatch' at the first request "
        "(disaggregation/common/conn.py) [pair.kv_cache_dtype]; fix: declare the same kv_cache_dtype for both, best "
        "once in sglang_engine_common",
        "p1: sglang_engine_extra_env.SGLANG_DSV4_KV_LAYOUT='paged' and d1: "
        "sglang_engine_extra_env.SGLANG_DSV4_KV_LAYOUT=None: the KV layout of a PD pair must match; SGLang's decode "
        "raises 'KV layout mismatch' at the first request [pair.kv_layout]; fix: set the same SGLANG_DSV4_KV_LAYOUT on "
        "both engines, or on neither",
        "p1: sglang_engine_common.bf16_index_k=True and d1: sglang_decode.bf16_index_k=False: bf16 index keys "
        "(SGLANG_DSV4_BF16_INDEX_K) double the indexer state per token on one side only, and the KV transfer refuses "
        "paired state items of different lengths [pair.bf16_index_k]; fix: declare bf16_index_k once in "
        "sglang_engine_common",
        "p1: sglang_prefill.disaggregation_ib_device='mlx5_0' and d1: sglang_decode.disaggregation_ib_device (unset: "
        "None): one side is pinned to IB devices and the other auto-discovers them (mooncake over RDMA), so the pair "
        "may pick NICs that do not reach each other [pair.ib_device]; fix: declare disaggregation_ib_device on both "
        "engines or on neither",
        # the decode's context_length is unset, yet shown as a value (the model's maximum), never as "unset"
        "p1: sglang_prefill.context_length=2097152 and d1: sglang_decode.context_length=1048576: the decode must "
        "accept every request the prefill accepts, and requests longer than the decode's context_length are prefilled "
        "and then refused [pair.context_length]; fix: raise the decode's context_length to >= 2097152 or lower the "
        "prefill's",
        "p1: sglang_prefill.served_model_name='x' and d1: sglang_model.served_name='deepseek-v4': the router sends "
        "each request to both halves of a pair, which must serve the same model under the same name "
        "[pair.served_model_name]; fix: declare one sglang_model for the whole fleet",
    ]


def test_backend_and_model_path_texts(dsv4: dict[str, Any]) -> None:
    """Synthetic pair: nixl against mooncake_tcp, and two model paths."""
    p = Side("p1", "prefill", hostvars(sglang_prefill={"disaggregation_transfer_backend": "nixl"}), dsv4)
    d = Side(
        "d1",
        "decode",
        hostvars(
            sglang_decode={"disaggregation_transfer_backend": "mooncake_tcp"},
            sglang_model={"path": "/models/other"},
        ),
        dsv4,
    )
    assert pair_problems(p, d) == [
        "p1: sglang_prefill.disaggregation_transfer_backend='nixl' and d1: "
        "sglang_decode.disaggregation_transfer_backend='mooncake_tcp': both halves of a pair must use the same KV "
        "transfer backend (mooncake_tcp is mooncake forced onto TCP, which an RDMA peer does not reach) "
        "[pair.transfer_backend]; fix: declare the same disaggregation_transfer_backend for both, best once in "
        "sglang_engine_common",
        "p1: sglang_model.path='/models/DeepSeek-V4-Flash' and d1: sglang_model.path='/models/other': the router sends "
        "each request to both halves of a pair, which must serve the same model under the same name [pair.model_path]; "
        "fix: declare one sglang_model for the whole fleet",
    ]


def test_an_agreeing_pair_and_a_context_fit_at_the_boundary(dsv4: dict[str, Any]) -> None:
    """Synthetic pair: equal context lengths (the decode accepts exactly what the prefill does) are no problem."""
    p = Side("p1", "prefill", hostvars(sglang_prefill={"context_length": 262144}), dsv4)
    d = Side("d1", "decode", hostvars(sglang_decode={"context_length": 262144}), dsv4)
    assert pair_problems(p, d) == []
    assert p.shown("context_length") == "=262144"
    assert d.shown("disaggregation_ib_device") == " (unset: None)"
