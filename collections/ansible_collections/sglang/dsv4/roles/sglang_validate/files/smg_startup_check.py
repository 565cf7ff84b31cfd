"""smg 1.13.0's own checks on rendered router command lines; run with a Python that has smg (the controller venv).

stdin:  {"cases": [{"id": str, "argv": [flags after `smg launch`...], "ablate": bool}, ...]}
stdout: [{"id", "ok", "error", "culprits"}, ...] in case order.

smg has no check-only mode, and its bounds live in two places:
1. Python (smg/launch_router.py, router_args.py, router.py): the argparse parser, `RouterArgs.from_cli_args`
   (worker URL lists), `_validate_router_args` and `Router.from_args` (discovery, history backends, and the
   conversion into the Rust `Router`, which refuses values that do not fit its field types, e.g. a negative
   `--queue-size`). These run on the line exactly as rendered, in this process.
2. Rust: the config validator runs when `Router.start()` begins (zero intervals and timeouts, a timeout that
   must be positive when a queue is configured, bind hosts that are not IP addresses, metrics port vs port).
   It is reached by starting smg for real, as a child process, on a copy of the line that cannot reach
   anything: the listeners (the mesh's included) on 127.0.0.1 and free ports, the mesh peers given by IP address on
   closed loopback ports (two declared ports that are equal stay equal, a
   declared 0 stays 0; a bind host that is not an IP address stays as declared, since smg refuses it before it
   binds), and every worker URL replaced by a closed port on 127.0.0.1, so no engine host is contacted. As soon
   as the main listener accepts a connection the line is accepted and the child is killed; a child that exits
   first refused it, with the last error line it printed.

`culprits` are the flags behind a refusal: those its message names (as `--flag`, as the field name, or as the
validator's field path); when it names none and the case asks to "ablate", each `--flag [values]` group is
dropped in turn (never the PD mode or the worker lists) and the line rerun; those whose removal lets smg
accept it are listed.
"""

from __future__ import annotations

import contextlib
import io
import ipaddress
import json
import os
import re
import socket
import subprocess
import sys
import time
from typing import Any

START_DEADLINE_S = 10.0
CHILD = "import sys; from smg.launch_router import launch_router, parse_router_args; " + (
    "launch_router(parse_router_args(sys.argv[1:]))"
)
# Validator field paths whose last part is not the flag's dest.
FIELD_FLAGS = {"metrics.host": "--prometheus-host", "metrics.port": "--prometheus-port"}
KEEP = ("--pd-disaggregation", "--prefill", "--decode")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_ERROR_LINE = re.compile(r"^[\w.]*(Error|Exception): ")


class FreePorts:
    """Free loopback ports, each held open until close(), so that no two of one line are the same port: a port
    closed at once may be handed out again by the next bind (two listeners of a line on one port, which smg refuses
    as a clash the declaration does not have)."""

    def __init__(self) -> None:
        self._held: list[socket.socket] = []

    def take(self) -> int:
        sock = socket.socket()
        self._held.append(sock)
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])

    def close(self) -> None:
        for sock in self._held:
            sock.close()


def groups(argv: list[str]) -> list[tuple[int, int]]:
    starts = [i for i, token in enumerate(argv) if token.startswith("--")]
    return list(zip(starts, [*starts[1:], len(argv)], strict=True))


def python_checks(argv: list[str]) -> str:
    """smg's Python-side refusal of the line as rendered, or ''."""
    from smg.launch_router import parse_router_args
    from smg.router import Router

    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            args = parse_router_args(list(argv))
            args._validate_router_args()
            Router.from_args(args)
    except SystemExit as exc:
        lines = [line for line in stderr.getvalue().splitlines() if line.strip()]
        return lines[-1] if lines else f"exit {exc.code}"
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return ""


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def isolated(argv: list[str]) -> tuple[list[str], int, dict[str, int]]:
    """The line with loopback listeners on free ports and unreachable workers; the main port to poll; and the
    free port that stands for each declared one."""
    out = list(argv)
    free = FreePorts()
    ports: dict[str, int] = {}
    main_port = 0
    for start, end in groups(out):
        flag, values = out[start], out[start + 1 : end]
        if flag in ("--host", "--prometheus-host", "--mesh-host", "--mesh-advertise-host") and values:
            out[start + 1] = "127.0.0.1" if _is_ip(values[0]) else values[0]
        elif flag in ("--port", "--prometheus-port", "--mesh-port") and values:
            if values[0] != "0" and values[0].lstrip("-").isdigit():
                out[start + 1] = str(ports.setdefault(values[0], free.take()))
            if flag == "--port":
                main_port = int(out[start + 1]) if out[start + 1].lstrip("-").isdigit() else 0
        elif flag in ("--prefill", "--decode") and values:
            out[start + 1] = f"http://127.0.0.1:{free.take()}"
        elif flag == "--mesh-peer-urls":  # the peers: closed loopback ports, the port's form kept
            for i, peer in enumerate(values, start + 1):
                host, _sep, port = peer.rpartition(":")
                out[i] = f"127.0.0.1:{free.take()}" if _is_ip(host) and port.isdigit() else peer
    if "--port" not in out:  # smg's default port: poll it where the child would listen
        main_port = free.take()
        out += ["--port", str(main_port)]
    free.close()
    return out, main_port, ports


def start_check(argv: list[str]) -> str:
    """smg's Rust-side refusal (the child's last error line), or '' once its main listener accepts."""
    line, port, ports = isolated(argv)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, *line],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )
    deadline = time.monotonic() + START_DEADLINE_S
    listening = False
    while time.monotonic() < deadline and child.poll() is None:
        if port:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                listening = True
                break
        time.sleep(0.05)
    if child.poll() is None:
        child.kill()
    output, _stderr = child.communicate()
    if listening or child.returncode is None or child.returncode < 0:
        return ""
    lines = [_ANSI.sub("", line).strip() for line in output.splitlines()]
    errors = [line for line in lines if _ERROR_LINE.match(line)]
    error = errors[-1] if errors else (lines[-1] if lines else f"smg exited with {child.returncode}")
    for declared, free in ports.items():  # speak of the declared ports, not their stand-ins
        error = re.sub(rf"(?<!\d){free}(?!\d)", declared, error)
    return error


def check(argv: list[str]) -> str:
    return python_checks(argv) or start_check(argv)


def _mentions(flag: str, text: str) -> bool:
    """`--flag` in the text, or its field name when that is unmistakable (has an underscore: queue_size)."""
    dest = flag[2:].replace("-", "_")
    names = [re.escape(flag)] + ([dest] if "_" in dest else [])
    return re.search(rf"(?<![\w.-])({'|'.join(names)})(?![\w-])", text) is not None


def _field_flag(field: str, flags: list[str]) -> str | None:
    """The flag behind a validator field path ('health_check.check_interval_secs')."""
    if field in FIELD_FLAGS:
        return FIELD_FLAGS[field]
    dests = {f[2:].replace("-", "_"): f for f in flags}
    last = field.rsplit(".", 1)[-1]
    for wanted in (field.replace(".", "_"), last):
        if wanted in dests:
            return dests[wanted]
    return next((f for d, f in dests.items() if d.endswith("_" + last)), None)


def named(argv: list[str], error: str) -> list[str]:
    flags = [argv[start] for start, _end in groups(argv) if argv[start] not in KEEP]
    found = [f for f in flags if _mentions(f, error)]
    for field in re.findall(r"field '([\w.]+)'", error):
        flag = _field_flag(field, flags)
        if flag in flags and flag not in found:
            found.append(flag)
    return found


def ablate(argv: list[str]) -> list[str]:
    culprits = []
    for start, end in groups(argv):
        if argv[start] not in KEEP and not check(argv[:start] + argv[end:]):
            culprits.append(argv[start])
    return culprits


def main() -> None:
    sys.argv[0] = "smg launch"  # the program name smg's parser prints in its errors
    request = json.load(sys.stdin)
    results: list[dict[str, Any]] = []
    for case in request["cases"]:
        argv = list(case["argv"])
        error = check(argv)
        culprits = named(argv, error) if error else []
        if error and not culprits and case.get("ablate"):
            culprits = ablate(argv)
        results.append({"id": case.get("id"), "ok": not error, "error": error, "culprits": culprits})
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
