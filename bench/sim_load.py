"""Load benchmark of the SGLang simulator: streaming requests at a fixed concurrency.

Starts a simulator pinned to one CPU core (unless --url is given), drives it from this process (pinned to
another core when there is one) and prints startup time, requests/s, generated tokens/s and p50/p99 time to
first token. It prints figures only; it asserts nothing about timing.

    .venv/bin/python bench/sim_load.py --concurrency 200 --requests 2000 --max-tokens 64
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parents[1]
MODEL_CONFIG = REPO / "models" / "deepseek-v4-flash" / "config.json"


@dataclass
class Results:
    ttft: list[float] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)
    tokens: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    def error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def start_sim(args: argparse.Namespace, model_dir: Path) -> tuple[subprocess.Popen[bytes], str, float]:
    port = free_port()
    env = {
        **os.environ,
        "SGLANG_SIM_TTFT_MS": str(args.ttft_ms),
        "SGLANG_SIM_TOKENS_PER_SEC": str(args.tps),
        "SGLANG_SIM_STEP_MS": str(args.step_ms),
    }
    cores = sorted(os.sched_getaffinity(0))
    argv = [
        sys.executable,
        "-m",
        "sglang_sim",
        "serve",
        "--model-path",
        str(model_dir),
        "--tp-size",
        "4",
        "--port",
        str(port),
        "--max-running-requests",
        str(args.max_running),
        "--log-level",
        "warning",
    ]
    started = time.monotonic()
    proc = subprocess.Popen(
        argv,
        env=env,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=(lambda: os.sched_setaffinity(0, {cores[0]})) if len(cores) > 1 else None,
    )
    if len(cores) > 1:
        os.sched_setaffinity(0, set(cores[1:]))
    url = f"http://127.0.0.1:{port}"
    import urllib.request

    deadline = started + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as r:
                if r.status == 200:
                    return proc, url, time.monotonic() - started
        except OSError:
            time.sleep(0.01)
    proc.kill()
    raise SystemExit("the simulator did not become healthy within 30 s")


async def one(session: aiohttp.ClientSession, url: str, args: argparse.Namespace, res: Results) -> None:
    if args.api == "chat":
        path = "/v1/chat/completions"
        body = {
            "model": "bench",
            "messages": [{"role": "user", "content": "word " * args.prompt_words}],
            "max_tokens": args.max_tokens,
            "stream": True,
        }
    else:
        path = "/generate"
        body = {
            "text": "word " * args.prompt_words,
            "sampling_params": {"max_new_tokens": args.max_tokens},
            "stream": True,
        }
    started = time.monotonic()
    first: float | None = None
    tokens = 0
    try:
        async with session.post(url + path, json=body) as resp:
            if resp.status != 200:
                res.error(f"http {resp.status}")
                await resp.read()
                return
            async for raw in resp.content:
                line = raw.strip()
                if not line.startswith(b"data: ") or line == b"data: [DONE]":
                    continue
                if first is None:
                    first = time.monotonic()
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    res.error("stream error")
                    return
                if args.api == "chat":
                    if chunk["choices"]:
                        tokens += len((chunk["choices"][0]["delta"].get("content") or "").split())
                else:
                    tokens = chunk["meta_info"]["completion_tokens"]
    except (aiohttp.ClientError, TimeoutError) as e:
        res.error(type(e).__name__)
        return
    if first is None:
        res.error("no tokens")
        return
    if tokens != args.max_tokens:
        res.error("short answer")
    res.ttft.append(first - started)
    res.e2e.append(time.monotonic() - started)
    res.tokens += tokens


async def drive(url: str, args: argparse.Namespace) -> tuple[Results, float]:
    res = Results()
    remaining = args.requests
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=args.timeout)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def worker() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                await one(session, url, args, res)

        started = time.monotonic()
        await asyncio.gather(*[worker() for _ in range(args.concurrency)])
        return res, time.monotonic() - started


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", help="an already running simulator (default: start one on one core)")
    p.add_argument("--concurrency", type=int, default=200)
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--prompt-words", type=int, default=32)
    p.add_argument("--api", choices=("generate", "chat"), default="chat")
    p.add_argument("--ttft-ms", type=float, default=20.0, help="SGLANG_SIM_TTFT_MS of the started simulator")
    p.add_argument("--tps", type=float, default=100.0, help="SGLANG_SIM_TOKENS_PER_SEC of the started simulator")
    p.add_argument("--step-ms", type=float, default=20.0, help="SGLANG_SIM_STEP_MS of the started simulator")
    p.add_argument("--max-running", type=int, default=256, help="--max-running-requests of the started simulator")
    p.add_argument("--timeout", type=float, default=120.0, help="per-request timeout (s)")
    args = p.parse_args()

    proc = None
    if args.url:
        url, startup = args.url.rstrip("/"), float("nan")
    else:
        tmp = tempfile.TemporaryDirectory()
        model_dir = Path(tmp.name) / "model"
        model_dir.mkdir()
        (model_dir / "config.json").write_bytes(MODEL_CONFIG.read_bytes())
        proc, url, startup = start_sim(args, model_dir)
    try:
        res, wall = asyncio.run(drive(url, args))
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
    done = len(res.e2e)
    print(f"simulator startup to healthy: {startup:.3f} s" + ("" if proc else " (not started here)"))
    print(
        f"api={args.api} concurrency={args.concurrency} requests={args.requests} max_tokens={args.max_tokens} "
        f"ttft_ms={args.ttft_ms} tokens_per_sec={args.tps} step_ms={args.step_ms}"
    )
    print(f"completed: {done}  errors: {sum(res.errors.values())} {res.errors or ''}")
    print(f"wall: {wall:.2f} s  requests/s: {done / wall:.1f}  generated tokens/s: {res.tokens / wall:.0f}")
    print(f"TTFT p50: {pct(res.ttft, 0.5) * 1000:.1f} ms  p99: {pct(res.ttft, 0.99) * 1000:.1f} ms")
    print(
        f"E2E  p50: {pct(res.e2e, 0.5) * 1000:.1f} ms  p99: {pct(res.e2e, 0.99) * 1000:.1f} ms"
        f"  (ideal {1000 * (args.ttft_ms / 1000 + (args.max_tokens - 1) / args.tps):.0f} ms)"
    )
    if res.e2e:
        print(f"mean E2E: {statistics.fmean(res.e2e) * 1000:.1f} ms")
    return 1 if res.errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
