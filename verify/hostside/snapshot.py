"""Runs ON a verified host (its python3, stdlib only, plus the project's module_utils shipped alongside).

One run collects what the verify checks need and prints it as JSON on stdout: file modes and owners, the
units' state and processes, the TCP listeners of those processes, the environment files (secret values
masked), the on-disk and running layers (sglang_layers), and the live state of every server
(sglang_engine_live and smg_live: /health, /readiness, /server_info, /v1/models, /v1/loads, /metrics, normalized
on the host so that raw bodies, which hold the API key, never leave it). GPU facts only where /dev/nvidia0 exists.

Usage: python3 snapshot.pyz '<JSON spec>'   (the spec is built by verify/verify_remote.py)
"""

from __future__ import annotations

import glob
import grp
import json
import os
import pwd
import socket
import stat
import subprocess
import sys
import time
from typing import Any

from ansible_collections.sglang.dsv4.plugins.module_utils import (
    sglang_engine_live,
    sglang_http,
    sglang_layers,
    sglang_sockets,
    smg_live,
)
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_flags import API_KEY_VAR, api_key_in, parse_env_file

SECRET_VARS = (API_KEY_VAR,)
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD")
UNIT_PROPS = (
    "Id",
    "LoadState",
    "ActiveState",
    "SubState",
    "UnitFileState",
    "MainPID",
    "User",
    "Group",
    "ExecStart",
    "EnvironmentFiles",
    "FragmentPath",
    "ControlGroup",
    "NRestarts",
)


def run(argv: list[str], timeout: float = 10.0) -> tuple[int, str]:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, str(exc)
    return proc.returncode, proc.stdout


def name_of(uid: int, group: bool = False) -> str:
    try:
        return grp.getgrgid(uid).gr_name if group else pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def stat_paths(paths: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path in paths:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            out[path] = {"exists": False}
            continue
        kind = "dir" if stat.S_ISDIR(st.st_mode) else "link" if stat.S_ISLNK(st.st_mode) else "file"
        out[path] = {
            "exists": True,
            "type": kind,
            "mode": stat.S_IMODE(st.st_mode),
            "user": name_of(st.st_uid),
            "group": name_of(st.st_gid, group=True),
        }
    return out


def masked_env(path: str) -> dict[str, Any]:
    """Variables of an environment file; secret values become "<set>" or "<empty>"."""
    try:
        with open(path) as f:
            env = parse_env_file(f.read())
    except FileNotFoundError:
        return {"exists": False, "vars": {}}
    except PermissionError as exc:
        return {"exists": True, "error": f"cannot read: {exc}", "vars": {}}
    out = {}
    for name, value in env.items():
        secret = name in SECRET_VARS or any(w in name.upper() for w in SECRET_WORDS)
        out[name] = ("<set>" if value else "<empty>") if secret else value
    return {"exists": True, "vars": out}


def api_key_of(path: str) -> str | None:
    try:
        with open(path) as f:
            return api_key_in(f.read())
    except OSError:
        return None


def unit_state(unit: str) -> dict[str, Any]:
    argv = ["systemctl", "show", "--no-pager"]
    for prop in UNIT_PROPS:
        argv += ["-p", prop]
    rc, text = run([*argv, f"{unit}.service"])
    out: dict[str, Any] = sglang_layers.parse_systemctl_show(text) if rc == 0 else {"error": text.strip()}
    rc, enabled = run(["systemctl", "is-enabled", f"{unit}.service"])
    out["is_enabled"] = enabled.strip()
    return out


def cgroup_pids(control_group: str) -> list[int]:
    """Every process whose cgroup is the unit's (or below it), whatever the cgroup layout."""
    if not control_group:
        return []
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cgroup") as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        for line in lines:
            path = line.split(":", 2)[-1]
            if path == control_group or path.startswith(control_group.rstrip("/") + "/"):
                pids.append(int(entry))
                break
    return sorted(pids)


def process(pid: int) -> dict[str, Any]:
    info: dict[str, Any] = {"pid": pid}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("Uid:", "Gid:")):
                    real, effective = (int(x) for x in line.split()[1:3])
                    group = line.startswith("Gid:")
                    key = "group" if group else "user"
                    info[key] = name_of(effective, group=group)
                    info[f"real_{key}"] = name_of(real, group=group)
                elif line.startswith("Name:"):
                    info["comm"] = line.split(None, 1)[1].strip()
    except OSError as exc:
        info["error"] = str(exc)
    return info


def http_status(url: str, timeout: float, api_key: str | None, transport: sglang_http.Transport) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    start = time.monotonic()
    try:
        reply = transport.get(url, headers, timeout)
    except sglang_http.TransportError as exc:
        return {"url": url, "status": None, "error": exc.reason, "seconds": round(time.monotonic() - start, 3)}
    return {
        "url": url,
        "status": reply.status,
        "body": reply.body[:2048].decode("utf-8", "replace")[:512],
        "seconds": round(time.monotonic() - start, 3),
    }


def gpu_facts(current_link: str) -> dict[str, Any]:
    out: dict[str, Any] = {"present": os.path.exists("/dev/nvidia0")}
    if not out["present"]:
        return out
    query = "index,memory.total,compute_cap,name"
    rc, text = run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"], timeout=30)
    out["nvidia_smi_rc"] = rc
    gpus = []
    for line in text.splitlines() if rc == 0 else []:
        cols = [c.strip() for c in line.split(",")]
        if len(cols) >= 3 and cols[0].isdigit():
            gpus.append(
                {
                    "index": int(cols[0]),
                    "memory_mib": float(cols[1]),
                    "compute_cap": cols[2],
                    "name": cols[3] if len(cols) > 3 else "",
                }
            )
    out["gpus"] = gpus
    if rc != 0:
        out["nvidia_smi_error"] = text.strip()[:500]
    release = os.path.realpath(current_link) if os.path.lexists(current_link) else None
    out["release"] = {"link": current_link, "target": release}
    if release:
        try:
            with open(os.path.join(release, "manifest.json")) as f:
                manifest = json.load(f)
            out["release"]["manifest"] = {k: manifest.get(k) for k in ("release", "torch_cuda_arch_list", "wheels")}
        except (OSError, ValueError) as exc:
            out["release"]["manifest_error"] = str(exc)
        infos = glob.glob(os.path.join(release, "venv/lib/python*/site-packages/dsv4_index_k/build_info.json"))
        if infos:
            with open(infos[0]) as f:
                out["release"]["kernel_build_info"] = json.load(f)
    return out


def resolve(names: list[str]) -> dict[str, list[str]]:
    out = {}
    for name in names:
        try:
            out[name] = sorted({str(info[4][0]) for info in socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)})
        except OSError:
            out[name] = []
    return out


def layers_of(server: dict[str, Any], facts_file: str) -> dict[str, Any]:
    host = sglang_layers.HostFiles(run=lambda argv: run(argv)[1])
    layers = sglang_layers.read_layers(
        server["role"], server["unit"], server["script"], server["env_file"], facts_file, host,
        unit_dir=os.path.dirname(server["unit_file"]),
    )  # fmt: skip
    return layers.snapshot()


def live_of(
    server: dict[str, Any], timeout: float, api_key: str | None, transport: sglang_http.Transport
) -> dict[str, Any]:
    name = socket.gethostname()
    if server["role"] == "router":
        result = smg_live.read_router(transport, server["base_url"], api_key=api_key, timeout=timeout, host=name)
    else:
        result = sglang_engine_live.read_engine(
            transport, server["base_url"], server["role"], api_key=api_key, timeout=timeout, host=name
        )
    return result.snapshot()


def main() -> int:
    spec = json.loads(sys.argv[1])
    timeout = float(spec.get("timeout", 5.0))
    started = time.monotonic()
    table = sglang_sockets.tcp_listeners()
    transport = sglang_http.UrllibTransport()
    out: dict[str, Any] = {"hostname": socket.gethostname(), "stat": stat_paths(spec.get("paths", []))}
    servers: dict[str, Any] = {}
    for server in spec.get("servers", []):
        unit = unit_state(server["unit"])
        pids = cgroup_pids(unit.get("ControlGroup", ""))
        api_key = api_key_of(server["env_file"])
        item: dict[str, Any] = {
            "unit": unit,
            "processes": [process(pid) for pid in pids],
            "listeners": sglang_sockets.listeners_of(pids, table),
            "env_file": masked_env(server["env_file"]),
            "health": http_status(server["health_url"], timeout, api_key, transport),
        }
        try:
            item["layers"] = layers_of(server, spec.get("facts_file") or "")
        except Exception as exc:  # a broken file must not hide the other checks
            item["layers_error"] = f"{type(exc).__name__}: {exc}"
        try:
            item["live"] = live_of(server, timeout, api_key, transport)
        except Exception as exc:
            item["live_error"] = f"{type(exc).__name__}: {exc}"
        servers[server["role"]] = item
    out["servers"] = servers
    out["resolved"] = resolve(spec.get("resolve", []))
    if spec.get("gpu"):
        out["gpu"] = gpu_facts(spec.get("current_link") or "/opt/sglang/current")
    out["seconds"] = round(time.monotonic() - started, 3)
    json.dump(out, sys.stdout, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
