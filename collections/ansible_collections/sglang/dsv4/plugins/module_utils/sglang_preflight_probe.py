"""The preflight's probe, run on the host by its python3 under the server's transient unit (sglang_preflight.PROBE is
this file's text, sent with `python3 -I -c`): stdlib only, one JSON argument, one JSON answer on stdout.

It binds every listener the server will own, reads the paths it reads, finds the modules it imports in its
release's Python, runs SGLang's own startup checks there, and counts the GPUs it can open, each as the unit's user
in the unit's sandbox. The module imports this file only to read its text.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from typing import Any

# Run in the release's Python: whether each module named on its command line is found.
FIND_MODULES = (
    "import importlib.util, json, sys\n"
    "def find(n):\n"
    "    try:\n"
    "        return 'found' if importlib.util.find_spec(n) is not None else 'not found'\n"
    "    except Exception as e:\n"
    "        return 'not found (%s: %s)' % (type(e).__name__, e)\n"
    "print(json.dumps({n: find(n) for n in sys.argv[1:]}))"
)
HAS_SGLANG = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('sglang') else 3)"


def err(e: OSError) -> str:
    return errno.errorcode.get(e.errno or 0, str(e.errno)) + ": " + str(e.strerror)


def listener(host: str, port: int) -> dict[str, Any]:
    """Bind `host`:`port` (`*`: every address, IPv6 and IPv4 where the host has IPv6) as the server will."""
    row: dict[str, Any] = {"host": host, "port": port}
    try:
        if host == "*":
            family, addr = (socket.AF_INET6, "::") if socket.has_ipv6 else (socket.AF_INET, "0.0.0.0")
        else:
            found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
            family, addr = found[0], str(found[4][0])
        row["family"] = "ipv6" if family == socket.AF_INET6 else "ipv4"
        try:
            s = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            family, addr, row["family"] = socket.AF_INET, "0.0.0.0", "ipv4"
            s = socket.socket(family, socket.SOCK_STREAM)
        with s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and host == "*":
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            s.bind((addr, port))
            s.listen(1)
        row["result"] = "bound"
    except socket.gaierror as e:
        row["result"], row["error"] = "unresolved", str(e)
    except OSError as e:
        row["result"], row["error"] = errno.errorcode.get(e.errno or 0, "error"), err(e)
    return row


def read(path: str) -> dict[str, Any]:
    """Read `path` as the server will: list a folder and enter it, read a file's first byte."""
    row: dict[str, Any] = {"path": path}
    try:
        if os.path.isdir(path):
            os.listdir(path)
            # Listing needs read permission, opening what it lists search permission (a folder of mode 0744 lists
            # its names to another user and opens none of its files): `<folder>/.` resolves only with it.
            os.stat(os.path.join(path, "."))
        else:
            with open(path, "rb") as f:
                f.read(1)
        row["result"] = "read"
    except OSError as e:
        row["result"], row["error"] = errno.errorcode.get(e.errno or 0, "error"), err(e)
    return row


def find_modules(python: str, names: list[str]) -> dict[str, str]:
    """Whether the release's Python finds each module (found / not found (why) / no executable / error: ...)."""
    if not os.access(python, os.X_OK):
        return {name: "no executable " + python for name in names}
    run = subprocess.run(
        [python, "-I", "-c", FIND_MODULES, *names], capture_output=True, text=True, timeout=60, check=False
    )
    try:
        return dict(json.loads(run.stdout))
    except ValueError:
        return {n: "error: " + (run.stderr.strip().splitlines() or ["?"])[-1] for n in names}


def startup_check(python: str, check: dict[str, Any]) -> dict[str, Any]:
    """SGLang's own startup checks on the engine's flags, in the release's Python with this environment: the
    check's files written to a temporary folder, its script run on one case (the flags, the SGLang variables)."""
    found = subprocess.run([python, "-I", "-c", HAS_SGLANG], timeout=60, check=False)
    if found.returncode != 0:
        return {"skipped": f"the release's Python {python} has no sglang"}
    try:
        where = tempfile.mkdtemp(prefix="sglang-preflight-")
    except OSError as e:
        return {"skipped": f"no writable temporary folder under the unit ({err(e)})"}
    run = None
    try:
        for name, text in check["files"].items():
            with open(os.path.join(where, name), "w") as f:
                f.write(text)
        env = {k: v for k, v in os.environ.items() if k.startswith(("SGLANG_", "SGL_", "MC_"))}
        argv = [re.sub(r"\$\{(\w+)\}", lambda m: os.environ.get(m.group(1), ""), a) for a in check["argv"]]
        case = {"cases": [{"id": "preflight", "argv": argv, "environ": env, "ablate": False}]}
        run = subprocess.run([python, os.path.join(where, check["script"])], input=json.dumps(case),
                             capture_output=True, text=True, timeout=check["timeout"], check=False)  # fmt: skip
        return dict(json.loads(run.stdout)[0])
    except subprocess.TimeoutExpired:
        return {"ok": False, "culprits": [], "error": f"the check did not finish within {check['timeout']} s"}
    except (ValueError, IndexError):
        stderr = run.stderr if run is not None else ""
        return {"ok": False, "culprits": [], "error": "the check did not finish: " + stderr.strip()[-600:]}
    finally:
        shutil.rmtree(where, ignore_errors=True)


def open_gpus(ids: list[Any]) -> int:
    """How many of the GPUs /dev/nvidia<id> the unit can open."""
    opened = 0
    for n in ids:
        try:
            os.close(os.open(f"/dev/nvidia{int(n)}", os.O_RDWR))
            opened += 1
        except OSError:
            pass
    return opened


def probe(spec: dict[str, Any]) -> dict[str, Any]:
    """The answer to the spec: {user, listeners, paths, imports, gpus, and sglang_check where asked}."""
    out: dict[str, Any] = {"user": os.geteuid(), "listeners": [], "paths": [], "imports": {}, "gpus": None}
    out["listeners"] = [listener(host, port) for host, port in spec["listeners"]]
    out["paths"] = [read(path) for path in spec["paths"]]
    python = spec.get("python")
    if python and spec["imports"]:
        out["imports"] = find_modules(python, spec["imports"])
    if python and spec.get("sglang_check") and os.access(python, os.X_OK):
        out["sglang_check"] = startup_check(python, spec["sglang_check"])
    if spec["gpu_ids"]:
        out["gpus"] = open_gpus(spec["gpu_ids"])
    return out


def main(argv: list[str]) -> None:
    sys.stdout.write(json.dumps(probe(json.loads(argv[0]))) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
