"""SGLang 0.5.23's memory defaults by GPU size, from its own code on CPU; run inside the parser venv.

stdin: {"argvs": [[...], ...], "gibs": [GiB of one GPU, ...]}
stdout: per command line, one dict per size: the chunked_prefill_size and mem_fraction_static SGLang resolves when
the command line leaves them unset (arg_groups/memory_hook.handle_gpu_memory_settings), the GPU's memory set to
the given size.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys

import sglang_pool  # noqa: F401  the CPU bootstrap (stubs, H200s), as the pool sizing runs SGLang
from sglang.srt import runtime_context
from sglang.srt.arg_groups import memory_hook
from sglang.srt.server_args import prepare_server_args


def resolve(argv: list[str], gib: float) -> dict[str, object]:
    memory_hook.get_device_memory_capacity = lambda device=None: gib * 1024  # MiB, as SGLang reads it
    with contextlib.redirect_stderr(io.StringIO()):
        server_args = prepare_server_args(list(argv))
        runtime_context.publish(server_args, role="test")
        resolved = server_args.resolved_dict()
    return {k: resolved[k] for k in ("chunked_prefill_size", "mem_fraction_static")}


def main() -> None:
    request = json.load(sys.stdin)
    os.environ.setdefault("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "0")
    json.dump([[resolve(argv, gib) for gib in request["gibs"]] for argv in request["argvs"]], sys.stdout)


if __name__ == "__main__":
    main()
