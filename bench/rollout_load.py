"""Closed-loop load through the router while a command runs: what did the clients see?

N clients each send a short non-streaming `/generate` to the router, wait for the answer, and send the next, from
before the command starts until it has ended (plus --tail seconds). Then it prints the histogram of outcomes, the
stretch without a successful answer (the window), and "lost X of Y".

Lost is every answer but a 200 that finished its generation, or an explicit 429/503 that carries `Retry-After`
(the router's "come back later" under its declared limits): a connection refused or reset, a timeout (a hang),
another status, a 200 whose generation was aborted.

    .venv/bin/python bench/rollout_load.py --url http://127.0.0.1:8000 --clients 6 -- \\
        ansible-playbook site.yml -e @change.yml

With --netns NAME the clients run in that network namespace (the lab router listens on its loopback) while the
command runs in the caller's. Exit status: 0 when the command succeeded and at most --allow-lost were lost, 1 when
more were lost, 2 when the command failed, 3 when the router served nothing before the command (nothing measured).
Every loop is bounded: per-request --request-timeout, the command's --command-timeout.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import itertools
import json
import os
import shlex
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp

CLONE_NEWNET = 0x40000000
OK = "200"
EXPLICIT = ("429 + Retry-After", "503 + Retry-After")


@dataclass
class Outcome:
    """One request: when it started and ended (seconds since the load began) and how it ended."""

    start: float
    end: float
    kind: str


@dataclass
class Report:
    clients: int
    url: str
    command: list[str]
    command_rc: int | None
    command_start: float
    command_end: float
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def histogram(self) -> dict[str, int]:
        return dict(Counter(o.kind for o in self.outcomes).most_common())

    @property
    def total(self) -> int:
        return len(self.outcomes)

    @property
    def lost(self) -> int:
        return sum(1 for o in self.outcomes if is_lost(o.kind))

    def window(self) -> tuple[float, float, float] | None:
        """The longest stretch, from the command's start to the last answer, with no successful answer:
        (length, from, to), seconds since the load began."""
        if not self.outcomes:
            return None
        last = max(o.end for o in self.outcomes)
        ends = sorted(o.end for o in self.outcomes if o.kind == OK and self.command_start < o.end < last)
        marks = [self.command_start, *ends, last]
        gap = max(itertools.pairwise(marks), key=lambda pair: pair[1] - pair[0])
        return (gap[1] - gap[0], gap[0], gap[1])

    def to_json(self) -> dict[str, Any]:
        window = self.window()
        return {
            "clients": self.clients,
            "url": self.url,
            "command": self.command,
            "command_rc": self.command_rc,
            "command_seconds": round(self.command_end - self.command_start, 3),
            "histogram": self.histogram,
            "total": self.total,
            "lost": self.lost,
            "window_seconds": round(window[0], 3) if window else None,
            "outcomes": [asdict(o) for o in self.outcomes],
        }


def is_lost(kind: str) -> bool:
    return kind != OK and not is_explicit(kind)


def is_explicit(kind: str) -> bool:
    """An explicit "come back later": 429 or 503 with Retry-After (the router's error code, if any, follows)."""
    return kind.startswith(EXPLICIT)


def classify(status: int, headers: Any, body: bytes) -> str:
    """The outcome of an answered request."""
    if status == 200:
        try:
            finish = json.loads(body).get("meta_info", {}).get("finish_reason") or {}
        except (ValueError, AttributeError):
            return "200 unreadable body"
        if isinstance(finish, dict) and finish.get("type") == "abort":
            return "200 aborted"
        return OK
    code = headers.get("X-Smg-Error-Code") or error_code(body)
    suffix = f" ({code})" if code else ""
    if status in (429, 503) and headers.get("Retry-After"):
        return f"{status} + Retry-After{suffix}"
    return f"http {status}{suffix}"


def error_code(body: bytes) -> str:
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return ""
    return str(error.get("code") or "") if isinstance(error, dict) else ""


def classify_error(error: BaseException) -> str:
    if isinstance(error, TimeoutError):
        return "timeout (no answer)"
    if isinstance(error, aiohttp.ServerDisconnectedError):
        return "connection closed without an answer"
    if isinstance(error, aiohttp.ClientConnectorError):
        return "connection refused"
    if isinstance(error, aiohttp.ClientOSError):
        return "connection reset"
    return f"client error {type(error).__name__}"


class Load:
    """The closed-loop clients."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.outcomes: list[Outcome] = []
        self.stop = asyncio.Event()
        self.t0 = time.monotonic()
        self.body = {
            "text": "word " * args.prompt_words,
            "sampling_params": {"max_new_tokens": args.max_tokens, "ignore_eos": True},
        }
        key = os.environ.get(args.api_key_env, "")
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}

    def now(self) -> float:
        return time.monotonic() - self.t0

    async def client(self, session: aiohttp.ClientSession) -> None:
        while not self.stop.is_set():
            start = self.now()
            try:
                async with session.post(
                    self.args.url.rstrip("/") + "/generate", json=self.body, headers=self.headers
                ) as resp:
                    body = await resp.read()
                    kind = classify(resp.status, resp.headers, body)
                    retry_after = resp.headers.get("Retry-After")
            except (aiohttp.ClientError, TimeoutError) as e:
                kind, retry_after = classify_error(e), None
            self.outcomes.append(Outcome(round(start, 4), round(self.now(), 4), kind))
            if is_explicit(kind):
                # A client that honours the answer: wait what the router asked (bounded), then try again.
                await self.wait(min(float(retry_after or 1), self.args.max_retry_after))
            elif kind != OK:
                await self.wait(self.args.error_pause)

    async def wait(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self.stop.wait(), seconds)
        except TimeoutError:
            pass

    def served(self) -> bool:
        return any(o.kind == OK for o in self.outcomes)


async def run(args: argparse.Namespace, command: list[str], action: Callable[[], Awaitable[int]]) -> Report:
    """Load through the router, `action` (the command) once the router serves, then the tail; the report."""
    load = Load(args)
    timeout = aiohttp.ClientTimeout(total=args.request_timeout)
    connector = aiohttp.TCPConnector(limit=args.clients, force_close=args.no_keepalive)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        tasks = [asyncio.create_task(load.client(session)) for _ in range(args.clients)]
        deadline = time.monotonic() + max(args.warmup, args.ready_timeout)
        await asyncio.sleep(args.warmup)
        while not load.served() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        rc: int | None = None
        started = ended = load.now()
        if load.served():
            started = load.now()
            rc = await action()
            ended = load.now()
            await asyncio.sleep(args.tail)
        load.stop.set()
        await asyncio.gather(*tasks)
    return Report(args.clients, args.url, command, rc, started, ended, load.outcomes)


async def run_command(command: list[str], timeout: float, home_netns: int | None) -> int:
    """Run the command in the caller's network namespace; its output goes to ours."""

    def back_home() -> None:
        if home_netns is not None:
            setns(home_netns)

    proc = await asyncio.create_subprocess_exec(*command, preexec_fn=back_home)
    try:
        return await asyncio.wait_for(proc.wait(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        print(f"rollout_load: the command ran past --command-timeout {timeout:g} s and was killed", file=sys.stderr)
        return 124


def setns(fd: int) -> None:
    """setns(2) into the network namespace `fd` refers to (os.setns is Python 3.12+)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def enter_netns(name: str) -> int:
    """Move this process into /run/netns/NAME; returns a descriptor of the namespace it came from."""
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        setns(target)
    finally:
        os.close(target)
    return home


def render(report: Report, allow_lost: int) -> str:
    lines = [
        f"load: {report.clients} closed-loop clients, POST {report.url.rstrip('/')}/generate",
        f"command: {shlex.join(report.command)}",
        f"  exit {report.command_rc}, {report.command_end - report.command_start:.1f} s",
        "outcomes:",
    ]
    width = max((len(k) for k in report.histogram), default=0)
    for kind, count in report.histogram.items():
        mark = "  (lost)" if is_lost(kind) else ""
        lines.append(f"  {kind:<{width}}  {count:>7}{mark}")
    window = report.window()
    if window is not None:
        length, start, end = window
        lines.append(
            f"window: {length:.2f} s without a successful answer"
            f" (t={start:.2f} s to t={end:.2f} s; the command ran t={report.command_start:.2f} s"
            f" to t={report.command_end:.2f} s)"
        )
    verdict = "ok" if report.lost <= allow_lost else f"more than the {allow_lost} allowed"
    lines.append(f"lost {report.lost} of {report.total} ({verdict})")
    return "\n".join(lines)


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    argv = list(argv)
    if "--" not in argv:
        raise SystemExit("rollout_load: give the command after --, e.g. -- ansible-playbook site.yml")
    split = argv.index("--")
    command = argv[split + 1 :]
    if not command:
        raise SystemExit("rollout_load: the command after -- is empty")
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default="http://127.0.0.1:8000", help="the router (default %(default)s)")
    p.add_argument("--clients", type=int, default=6)
    p.add_argument("--netns", help="run the clients in this network namespace (/run/netns/NAME)")
    p.add_argument("--max-tokens", type=int, default=8, help="max_new_tokens of each request")
    p.add_argument("--prompt-words", type=int, default=16)
    p.add_argument("--request-timeout", type=float, default=60.0, help="a request without an answer by then hangs")
    p.add_argument("--command-timeout", type=float, default=1800.0)
    p.add_argument("--warmup", type=float, default=1.0, help="seconds of load before the command starts")
    p.add_argument("--ready-timeout", type=float, default=20.0, help="wait this long for a first 200")
    p.add_argument("--tail", type=float, default=1.0, help="seconds of load after the command ended")
    p.add_argument("--error-pause", type=float, default=0.05, help="a client's pause after a lost request")
    p.add_argument("--max-retry-after", type=float, default=2.0, help="cap on the Retry-After a client honours")
    p.add_argument("--allow-lost", type=int, default=0)
    p.add_argument("--no-keepalive", action="store_true", help="a new connection for every request")
    p.add_argument("--api-key-env", default="SGLANG_API_KEY", help="environment variable with the router's key")
    p.add_argument("--json", help="also write the report (every outcome) to this file")
    args = p.parse_args(argv[:split])
    if args.clients < 1:
        p.error(f"--clients {args.clients}: at least 1 client is needed")
    return args, command


def main(argv: Sequence[str] | None = None) -> int:
    args, command = parse(sys.argv[1:] if argv is None else argv)
    home = enter_netns(args.netns) if args.netns else None
    report = asyncio.run(run(args, command, lambda: run_command(command, args.command_timeout, home)))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report.to_json(), f, indent=1)
    if report.command_rc is None:
        print(render(report, args.allow_lost))
        print(f"rollout_load: {args.url} answered no request with 200 in {args.ready_timeout:g} s; command not run")
        return 3
    print(render(report, args.allow_lost))
    if report.command_rc != 0:
        return 2
    return 1 if report.lost > args.allow_lost else 0


if __name__ == "__main__":
    sys.exit(main())
