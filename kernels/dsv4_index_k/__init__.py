"""Runtime side of the dsv4-index-k wheel: the compiled library, its headers and the format switch."""

from __future__ import annotations

import ctypes
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__version__ = "0.1.0"

ENV_SWITCH = "SGLANG_DSV4_BF16_INDEX_K"
BYTES_PER_TOKEN_HEAD = {"fp8": 132, "bf16": 256}
_HERE = Path(__file__).resolve().parent


def bf16_index_k_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Same rule as the engine and the library: "1" or "true" (any case) selects bf16."""
    value = (os.environ if environ is None else environ).get(ENV_SWITCH, "")
    return value.lower() in ("1", "true")


def index_k_format(environ: Mapping[str, str] | None = None) -> str:
    return "bf16" if bf16_index_k_enabled(environ) else "fp8"


def library_path() -> Path:
    return _HERE / "libdsv4_index_k.so"


def include_dir() -> Path:
    return _HERE / "include"


def build_info() -> dict[str, Any]:
    """Architectures and nvcc version the wheel was built with."""
    return json.loads((_HERE / "build_info.json").read_text())


def load_library() -> ctypes.CDLL:
    """Loads the library; the launchers take a pointer to a Dsv4IndexKArgs struct (fused_index_k.h)."""
    lib = ctypes.CDLL(str(library_path()))
    lib.dsv4_index_k_bytes_per_token_head.argtypes = [ctypes.c_int]
    lib.dsv4_index_k_bytes_per_token_head.restype = ctypes.c_int
    lib.dsv4_index_k_page_bytes.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
    lib.dsv4_index_k_page_bytes.restype = ctypes.c_size_t
    lib.dsv4_index_k_bf16_enabled.argtypes = []
    lib.dsv4_index_k_bf16_enabled.restype = ctypes.c_int
    lib.dsv4_index_k_store.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    lib.dsv4_index_k_store.restype = ctypes.c_int
    lib.dsv4_index_k_store_auto.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.dsv4_index_k_store_auto.restype = ctypes.c_int
    return lib
