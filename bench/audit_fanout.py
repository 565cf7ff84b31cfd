"""Audit fan-out: how the live read of the audit scales with the number of engine endpoints.

Starts N simulated engines (`python -m sglang_sim`, one process each, on loopback) and, for 1, 8 and 64 of
them, times:
  audit  - what the audit does per endpoint (module_utils.sglang_engine_live.read_engine: /server_info, /v1/models,
           /v1/loads, /metrics in threads, normalized, then sglang_drift.judge), for all endpoints at once
           (one thread per endpoint, as Ansible runs one module per host in parallel forks);
  floor  - one concurrent fan-out of the same raw GETs, bodies read and dropped (no parsing, no comparison):
           one flat thread pool with the audit's transport, and aiohttp on one event loop; the faster counts.
With --ansible it also times the sglang_live_info module run by ansible-playbook, one inventory host per endpoint
(connection local, forks = N): that adds Ansible's per-host process start, which a 2-core machine serializes.

Prints figures only; nothing is asserted.

    .venv/bin/python bench/audit_fanout.py [--sizes 1,8,64] [--repeat 5] [--ansible]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import aiohttp
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_drift import judge
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_engine_live import ENGINE_PATHS, read_engine
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_http import UrllibTransport

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "models" / "deepseek-v4-flash"
API_KEY = "bench-key"
DECLARED = {"context_length": 131072, "max_running_requests": 64, "tp_size": 4, "disaggregation_mode": "decode",
            "enable_metrics": True, "api_key": "<redacted>"}  # fmt: skip


def engine_argv(port: int) -> list[str]:
    return [
        sys.executable, "-m", "sglang_sim", "--model-path", str(MODEL), "--host", "127.0.0.1", "--port", str(port),
        "--tp-size", "4", "--context-length", "131072", "--max-running-requests", "64",
        "--disaggregation-mode", "decode", "--enable-metrics", "--api-key", API_KEY, "--log-level", "warning",
    ]  # fmt: skip


def start_engines(count: int, base_port: int) -> list[subprocess.Popen[bytes]]:
    env = {**os.environ, "SGLANG_SIM_STARTUP_DELAY_S": "0"}
    return [
        subprocess.Popen(engine_argv(base_port + i), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for i in range(count)
    ]


def wait_ready(urls: list[str], deadline_s: float = 180.0) -> None:
    pending, start = set(urls), time.monotonic()
    while pending:
        if time.monotonic() - start > deadline_s:
            raise SystemExit(f"{len(pending)} engines did not answer /health in {deadline_s:.0f} s")
        for url in list(pending):
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                    if resp.status == 200:
                        pending.discard(url)
            except OSError:
                pass
        time.sleep(0.2)


def audit(urls: list[str]) -> None:
    """The audit's live read of every endpoint, endpoints in parallel (Ansible forks), endpoints' paths in threads."""
    transport = UrllibTransport()

    def one(url: str) -> None:
        live = read_engine(transport, url, "decode", API_KEY, timeout=30, host="bench")
        if live.status != "ok" or live.engine is None:
            raise SystemExit(f"{url}: {live.status}: {live.errors}")
        judge("decode", DECLARED, None, live.snapshot())

    with ThreadPoolExecutor(max_workers=len(urls)) as pool:
        list(pool.map(one, urls))


def floor_threads(urls: list[str]) -> None:
    """One flat thread pool over every GET of every endpoint, with the audit's transport."""
    transport = UrllibTransport()
    headers = {"Authorization": f"Bearer {API_KEY}"}
    gets = [u + p for u in urls for p in ENGINE_PATHS.values()]
    with ThreadPoolExecutor(max_workers=len(gets)) as pool:
        for reply in pool.map(lambda url: transport.get(url, headers, 30), gets):
            if reply.status != 200:
                raise SystemExit(f"GET answered {reply.status}")


def floor_aiohttp(urls: list[str]) -> None:
    """One concurrent fan-out of the same GETs on one event loop."""

    async def run() -> None:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        limits = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=limits, headers=headers) as session:

            async def get(url: str) -> None:
                async with session.get(url) as resp:
                    await resp.read()
                    if resp.status != 200:
                        raise SystemExit(f"{url}: {resp.status}")

            await asyncio.gather(*(get(u + p) for u in urls for p in ENGINE_PATHS.values()))

    asyncio.run(run())


def ansible_audit(urls: list[str], workdir: Path) -> Callable[[], None]:
    """ansible-playbook running sglang_live_info once per endpoint (one local inventory host each, forks = N)."""
    inventory = {"all": {"hosts": {f"e{i}": {"sglang_bench_url": u} for i, u in enumerate(urls)}}}
    (workdir / "hosts.json").write_text(json.dumps(inventory))
    play = [{
        "name": "Read every engine", "hosts": "all", "connection": "local", "gather_facts": False,
        "tasks": [{"name": "Read the live limits", "sglang.dsv4.sglang_live_info": {
            "endpoint": "{{ sglang_bench_url }}", "role": "decode", "api_key": API_KEY}}],
    }]  # fmt: skip
    (workdir / "play.json").write_text(json.dumps(play))
    exe = shutil.which("ansible-playbook", path=str(Path(sys.executable).parent)) or "ansible-playbook"
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_FORKS": str(len(urls)),
           "ANSIBLE_PYTHON_INTERPRETER": sys.executable}  # fmt: skip
    cmd = [exe, "-i", str(workdir / "hosts.json"), str(workdir / "play.json")]

    def run() -> None:
        done = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"ansible-playbook failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")

    return run


def timed(fn: Callable[[], None], repeat: int) -> float:
    fn()  # warm-up: connections, imports, caches
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,8,64", help="endpoint counts to time (default 1,8,64)")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per figure; the median is shown")
    parser.add_argument("--base-port", type=int, default=32000)
    parser.add_argument("--ansible", action="store_true", help="also time ansible-playbook with one host per endpoint")
    opts = parser.parse_args()
    sizes = sorted({int(s) for s in opts.sizes.split(",")})
    urls = [f"http://127.0.0.1:{opts.base_port + i}" for i in range(max(sizes))]
    started = time.perf_counter()
    procs = start_engines(len(urls), opts.base_port)
    try:
        wait_ready(urls)
        print(f"{len(urls)} simulated engines up in {time.perf_counter() - started:.1f} s (cores: {os.cpu_count()})")
        columns = ("endpoints", "requests", "threads s", "aiohttp s", "audit s", "audit/floor")
        header = "  ".join(f"{c:>{max(len(c), 8)}}" for c in columns)
        header += f"  {'ansible s':>9}" if opts.ansible else ""
        print(header)
        figures: dict[int, float] = {}
        floors: dict[int, float] = {}
        with tempfile.TemporaryDirectory() as tmp:
            for n in sizes:
                subset = urls[:n]
                ft = timed(partial(floor_threads, subset), opts.repeat)
                fa = timed(partial(floor_aiohttp, subset), opts.repeat)
                a = timed(partial(audit, subset), opts.repeat)
                figures[n], floors[n] = a, min(ft, fa)
                line = f"{n:>9}  {n * len(ENGINE_PATHS):>8}  {ft:>9.3f}  {fa:>9.3f}  {a:>8.3f}  {a / floors[n]:>11.2f}"
                if opts.ansible:
                    line += f"  {timed(ansible_audit(subset, Path(tmp)), max(1, opts.repeat // 2)):>9.2f}"
                print(line, flush=True)
        lo, hi = min(sizes), max(sizes)
        print(
            f"audit time {hi} endpoints / {lo}: {figures[hi] / figures[lo]:.2f}x (target < 2x); "
            f"floor {hi} / {lo}: {floors[hi] / floors[lo]:.2f}x"
        )
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
