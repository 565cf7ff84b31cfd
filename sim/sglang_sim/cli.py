"""Command line: the `sglang serve` flags, parsed with SGLang 0.5.23's names, types, defaults and prefix rules."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from sglang_envelope.sglang_argspec import SGLANG
from sglang_envelope.sglang_schema import parse_size

from .flag_table import SGLANG_FLAGS

logger = logging.getLogger("sglang_sim")

PROG = "sglang serve"

# Choice lists come from SGLang's own argument table, so the simulator refuses exactly what SGLang refuses.
KV_CACHE_DTYPES = tuple(SGLANG["kv_cache_dtype"].choices or ())
DISAGGREGATION_MODES = tuple(SGLANG["disaggregation_mode"].choices or ())
TRANSFER_BACKENDS = tuple(SGLANG["disaggregation_transfer_backend"].choices or ())
ATTENTION_BACKENDS = tuple(SGLANG["attention_backend"].choices or ())

# Deprecated flags SGLang 0.5.23 still accepts, with the warning it logs for each.
DEPRECATED_FLAG_WARNINGS = {
    "disable_cuda_graph": "'--disable-cuda-graph' is deprecated and will be removed in a future release. "
    "Use '--cuda-graph-backend-{decode,prefill}=disabled' instead.",
    "enable_dp_attention": "'--enable-dp-attention' is deprecated and will be removed in a future release. "
    "Use '--attn-dp-size <dp-size>' instead.",
}


def human_readable_int(value: str) -> int:
    """argparse type for SGLang's human-readable ints (the parser lives in the shared envelope schema)."""
    try:
        return parse_size(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


human_readable_int.__name__ = "human_readable_int"

_TYPES: dict[str, Any] = {"int": int, "float": float, "size": human_readable_int, "str": str}
UNMODELLED_PREFIX = "unmodelled__"


# The flags the simulator models, by dest: argparse keyword arguments with SGLang 0.5.23's types and defaults.
MODELLED: dict[str, dict[str, Any]] = {
    # Model and serving.
    "model_path": {"type": str, "required": True},
    "served_model_name": {"type": str, "default": None},
    "host": {"type": str, "default": "127.0.0.1"},
    "port": {"type": int, "default": 30000},
    "trust_remote_code": {"action": "store_true"},
    "api_key": {"type": str, "default": None},
    "log_level": {"type": str, "default": "info"},
    "watchdog_timeout": {"type": float, "default": 300},
    "enable_metrics": {"action": "store_true"},
    "enable_cache_report": {"action": "store_true"},
    "allow_auto_truncate": {"action": "store_true"},
    # Limits and memory.
    "context_length": {"type": human_readable_int, "default": None},
    "max_total_tokens": {"type": human_readable_int, "default": None},
    "max_running_requests": {"type": int, "default": None},
    "max_queued_requests": {"type": int, "default": None},
    "chunked_prefill_size": {"type": int, "default": None},
    "max_prefill_tokens": {"type": human_readable_int, "default": 16384},
    "mem_fraction_static": {"type": float, "default": None},
    "page_size": {"type": int, "default": None},
    "kv_cache_dtype": {"type": str, "default": "auto", "choices": KV_CACHE_DTYPES},
    "swa_full_tokens_ratio": {"type": float, "default": None},
    "disable_radix_cache": {"action": "store_true"},
    "attention_backend": {"type": str, "default": None, "choices": ATTENTION_BACKENDS},
    # Parallelism.
    "tp_size": {"type": int, "default": 1},
    "dp_size": {"type": int, "default": 1},
    "base_gpu_id": {"type": int, "default": 0},
    "gpu_id_step": {"type": int, "default": 1},
    # CUDA graphs: 0.5.23 split them per phase, so the old --cuda-graph-max-bs is an ambiguous prefix.
    "cuda_graph_max_bs_decode": {"type": int, "default": None},
    "cuda_graph_max_bs_prefill": {"type": int, "default": None},
    "cuda_graph_bs_decode": {"type": int, "nargs": "+", "default": None},
    "cuda_graph_bs_prefill": {"type": int, "nargs": "+", "default": None},
    # Prefill/decode disaggregation.
    "disaggregation_mode": {"type": str, "default": "null", "choices": DISAGGREGATION_MODES},
    "disaggregation_bootstrap_port": {"type": int, "default": 8998},
    "disaggregation_transfer_backend": {"type": str, "default": "mooncake", "choices": TRANSFER_BACKENDS},
    "disaggregation_ib_device": {"type": str, "default": None},
}


def build_parser() -> argparse.ArgumentParser:
    """The parser: every SGLang flag in SGLang's order, allow_abbrev on, so prefixes resolve or clash alike."""
    p = argparse.ArgumentParser(prog=PROG, allow_abbrev=True)
    for opts, nargs, kind, dest in SGLANG_FLAGS:
        if dest in MODELLED:
            p.add_argument(*opts, dest=dest, **MODELLED[dest])
        elif nargs == "0" and len(opts) == 2 and opts[1] == "--no-" + opts[0][2:]:
            p.add_argument(
                opts[0], dest=UNMODELLED_PREFIX + dest, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS
            )
        elif nargs == "0":
            p.add_argument(
                *opts, dest=UNMODELLED_PREFIX + dest, action="store_const", const=True, default=argparse.SUPPRESS
            )
        else:
            p.add_argument(
                *opts,
                dest=UNMODELLED_PREFIX + dest,
                type=_TYPES[kind],
                nargs=None if nargs == "1" else nargs,
                choices=SGLANG[dest].choices if kind == "str" else None,
                default=argparse.SUPPRESS,
            )
    return p


def strip_serve_word(argv: list[str]) -> list[str]:
    """Accept `serve <flags>` as well as `<flags>`, like `sglang serve`."""
    return argv[1:] if argv and argv[0] == "serve" else argv


def parse_args(argv: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Parse argv. Returns (modelled args by dest, unmodelled args given). Exits 2 on a parse error."""
    ns = vars(build_parser().parse_args(strip_serve_word(argv)))
    unmodelled = {k[len(UNMODELLED_PREFIX) :]: v for k, v in ns.items() if k.startswith(UNMODELLED_PREFIX)}
    modelled = {k: v for k, v in ns.items() if not k.startswith(UNMODELLED_PREFIX)}
    return modelled, unmodelled


def log_unmodelled(unmodelled: dict[str, Any]) -> None:
    """Log, once at startup, the flags that were accepted but do not change the simulation."""
    for dest, warning in DEPRECATED_FLAG_WARNINGS.items():
        if unmodelled.get(dest):
            logger.warning(warning)
    rest = sorted(k for k in unmodelled if k not in DEPRECATED_FLAG_WARNINGS)
    if rest:
        logger.info("Flags accepted but not modelled by the simulator: %s", ", ".join(rest))
