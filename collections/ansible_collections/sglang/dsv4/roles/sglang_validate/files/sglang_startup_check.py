"""SGLang 0.5.23's own startup checks on rendered engine command lines, on CPU; run in the parser venv.

stdin:  {"cases": [{"id": str, "argv": [flags...], "environ": {NAME: value}, "ablate": bool}, ...]}
stdout: [{"id", "ok", "error", "culprits", "resolved"}, ...] in case order.

Each argv (the flags after `sglang serve`) goes through what `sglang serve` runs before it spawns anything
(sglang/cli/serve.py, launch_server.py, Engine._launch_subprocesses): `prepare_server_args` (SGLang's argparse
parser and ServerArgs.from_cli_args), `resolve_once` (the resolution pipeline of arg_groups/pipeline.py: model
overrides, the DeepSeek-V4 hook, the PD hooks, CUDA-graph and memory hooks), `check_server_args` and
`runtime_context.publish(role="tokenizer")`. Not run: `_set_envs_and_config` (GPU and kernel-library probes) and
`resolve_auto_parsers` (loads the tokenizer, which the controller does not have).

Only the case's environment is visible: SGLANG_*, SGL_* and MC_* variables of the calling shell are removed
first, and every case starts from the same environment, since hooks write to os.environ.

`culprits` are the flags and environment variables behind a refusal: those its message names (as `--flag` or
as the field name), else the flags whose non-numeric value it quotes; when it does neither and the case asks to
"ablate", each `--flag [values]` group and each environment variable is dropped in turn and the case rerun, and
those whose removal lets SGLang accept the line are listed.

Which InfiniBand devices exist is a fact of the engine host, not of the controller: the devices a line names
are presented as present (/sys/class/infiniband), so SGLang's own parsing of the value runs, not the existence
check.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sglang_cpu

sglang_cpu.install()
logging.disable(logging.WARNING)

from sglang.srt import runtime_context  # noqa: E402
from sglang.srt.server_args import prepare_server_args  # noqa: E402

SCRUBBED_PREFIXES = ("SGLANG_", "SGL_", "MC_")
IB_SYSFS = "/sys/class/infiniband"
_isdir, _listdir = os.path.isdir, os.listdir
_ib_devices: list[str] = []


def _present_ib_devices(argv: list[str]) -> None:
    """Show the IB devices the line names as the host's (/sys/class/infiniband): which devices an engine host
    has is a fact of that host, not of the controller; SGLang's own parsing of the value still runs."""
    if "--disaggregation-ib-device" not in argv[:-1]:
        _ib_devices[:] = []
        return
    value = argv[argv.index("--disaggregation-ib-device") + 1]
    # A line that names no device still runs on a host with IB: show one no value can name.
    _ib_devices[:] = sorted(set(re.findall(r"[A-Za-z][A-Za-z0-9_.-]*", value))) or ["<the host's device>"]


os.path.isdir = lambda path: (str(path) == IB_SYSFS and bool(_ib_devices)) or _isdir(path)  # type: ignore[assignment]
os.listdir = lambda path=".": list(_ib_devices) if str(path) == IB_SYSFS else _listdir(path)  # type: ignore[assignment]
# Fields reported back for the pair rules and the audit of what SGLang made of the declared values.
RESOLVED_FIELDS = (
    "model_path",
    "served_model_name",
    "context_length",
    "page_size",
    "kv_cache_dtype",
    "disaggregation_mode",
    "disaggregation_transfer_backend",
    "disaggregation_ib_device",
    "disaggregation_bootstrap_port",
    "chunked_prefill_size",
    "max_prefill_tokens",
    "max_running_requests",
    "mem_fraction_static",
    "swa_full_tokens_ratio",
    "tp_size",
    "dp_size",
    "watchdog_timeout",
    "attention_backend",
)


def _message(exc: BaseException, stderr: str) -> str:
    if isinstance(exc, SystemExit):  # argparse: the reason is the last line it printed
        lines = [line for line in stderr.strip().splitlines() if line.strip()]
        return lines[-1] if lines else f"exit {exc.code}"
    text = str(exc).strip() or repr(exc)
    return f"{type(exc).__name__}: {text}"


def startup(argv: list[str], environ: dict[str, str], base_env: dict[str, str]) -> tuple[str, dict[str, Any]]:
    """('' and SGLang's resolved fields) when SGLang would start on `argv`, else (its refusal, {})."""
    os.environ.clear()
    os.environ.update(base_env)
    os.environ.update(environ)
    _present_ib_devices(argv)
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            server_args = prepare_server_args(list(argv))
            server_args.resolve_once()
            server_args.check_server_args()
            runtime_context.publish(server_args, role="tokenizer")
            resolved = server_args.resolved_dict()
    except (SystemExit, Exception) as exc:
        return _message(exc, stderr.getvalue()), {}
    return "", {k: resolved.get(k) for k in RESOLVED_FIELDS}


def groups(argv: list[str]) -> list[tuple[int, int]]:
    """(start, end) of each `--flag [values]` group of an argv."""
    starts = [i for i, token in enumerate(argv) if token.startswith("--")]
    return list(zip(starts, [*starts[1:], len(argv)], strict=True))


def _mentions(flag: str, text: str) -> bool:
    """`--flag` in the text, or its field name when that is unmistakable (has an underscore: page_size)."""
    dest = flag[2:].replace("-", "_")
    names = [re.escape(flag)] + ([dest] if "_" in dest else [])
    return re.search(rf"(?<![\w.-])({'|'.join(names)})(?![\w-])", text) is not None


def named(argv: list[str], environ: dict[str, str], error: str) -> list[str]:
    """The flags and environment variables a refusal names; failing those, the flags whose (non-numeric) value
    it quotes ('fp8_e5m2 is not supported for ...')."""
    found = [argv[start] for start, _end in groups(argv) if _mentions(argv[start], error)]
    found += [name for name in environ if name in error]
    if found:
        return found
    quoted = []
    for start, end in groups(argv):
        value = " ".join(argv[start + 1 : end])
        if argv[start] == "--model-path" or len(value) < 3 or re.fullmatch(r"[-+.\d e]+", value):
            continue
        if re.search(rf"(?<![\w.-]){re.escape(value)}(?![\w-])", error):
            quoted.append(argv[start])
    return quoted


def ablate(argv: list[str], environ: dict[str, str], base_env: dict[str, str]) -> list[str]:
    """The flags and environment variables whose removal lets SGLang accept the line."""
    culprits = []
    for start, end in groups(argv):
        if argv[start] in ("--model-path", "--disaggregation-mode"):
            continue  # without them the line is another server, not a lesser one
        error, _output = startup(argv[:start] + argv[end:], environ, base_env)
        if not error:
            culprits.append(argv[start])
    for name in environ:
        error, _output = startup(argv, {k: v for k, v in environ.items() if k != name}, base_env)
        if not error:
            culprits.append(name)
    return culprits


def main() -> None:
    request = json.load(sys.stdin)
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(SCRUBBED_PREFIXES)}
    results = []
    for case in request["cases"]:
        argv, environ = list(case["argv"]), dict(case.get("environ") or {})
        error, resolved = startup(argv, environ, base_env)
        culprits = named(argv, environ, error) if error else []
        if error and not culprits and case.get("ablate"):
            culprits = ablate(argv, environ, base_env)
        results.append({"id": case.get("id"), "ok": not error, "error": error, "culprits": culprits,
                        "resolved": json.loads(json.dumps(resolved, default=str))})  # fmt: skip
    sys.stdout.write(json.dumps(results))
    sys.stdout.flush()
    os._exit(0)  # skip the interpreter's teardown of torch and transformers (seconds on 2 cores)


if __name__ == "__main__":
    main()
