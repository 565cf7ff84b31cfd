"""Command line: the `sglang serve` flags, parsed with SGLang 0.5.23's names, types, defaults and prefix rules."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_argspec import SGLANG, Flag
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_schema import parse_size

from .flag_table import SGLANG_FLAGS

logger = logging.getLogger("sglang_sim")

PROG = "sglang serve"

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


# The flags the simulator acts on, by dest. Their option strings, types, nargs, defaults and choices are SGLang's
# own (its argument table, sglang_argspec); only --model-path is required, as `sglang serve` requires it.
MODELLED: tuple[str, ...] = (
    # Model and serving.
    "model_path", "served_model_name", "host", "port", "trust_remote_code", "api_key", "log_level", "watchdog_timeout",
    "enable_metrics", "enable_cache_report", "allow_auto_truncate",
    # Limits and memory.
    "context_length", "max_total_tokens", "max_running_requests", "max_queued_requests", "chunked_prefill_size",
    "max_prefill_tokens", "mem_fraction_static", "page_size", "kv_cache_dtype", "swa_full_tokens_ratio",
    "disable_radix_cache", "attention_backend",
    # Parallelism.
    "tp_size", "dp_size", "base_gpu_id", "gpu_id_step",
    # CUDA graphs: 0.5.23 split them per phase, so the old --cuda-graph-max-bs is an ambiguous prefix.
    "cuda_graph_max_bs_decode", "cuda_graph_max_bs_prefill", "cuda_graph_bs_decode", "cuda_graph_bs_prefill",
    # Prefill/decode disaggregation.
    "disaggregation_mode", "disaggregation_bootstrap_port", "disaggregation_transfer_backend",
    "disaggregation_ib_device",
)  # fmt: skip
REQUIRED = ("model_path",)


def modelled_argument(dest: str) -> dict[str, Any]:
    """argparse keyword arguments of a modelled flag, from SGLang's argument table."""
    flag = SGLANG[dest]
    if flag.nargs == 0:
        return {"action": "store_true"}
    kw: dict[str, Any] = {"type": _TYPES[_token_kind(flag)], "default": flag.default}
    if flag.nargs is not None:
        kw["nargs"] = flag.nargs
    if flag.choices:
        kw["choices"] = tuple(flag.choices)
    if dest in REQUIRED:
        kw = {"type": kw["type"], "required": True}
    return kw


def _token_kind(flag: Flag) -> str:
    """The kind of one value token of a flag (an int list's tokens are ints)."""
    return flag.kind.removesuffix("list")


def build_parser() -> argparse.ArgumentParser:
    """The parser: every SGLang flag in SGLang's order, allow_abbrev on, so prefixes resolve or clash alike."""
    p = argparse.ArgumentParser(prog=PROG, allow_abbrev=True)
    for opts, nargs, kind, dest in SGLANG_FLAGS:
        if dest in MODELLED:
            p.add_argument(*opts, dest=dest, **modelled_argument(dest))
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
