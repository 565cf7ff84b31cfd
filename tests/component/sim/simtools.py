"""Helpers of the simulator tests: free ports, simulator and router processes, a launcher."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[3]
MODEL_CONFIG = REPO / "models" / "deepseek-v4-flash" / "config.json"
SMG = Path(sys.executable).parent / "smg"

# A DeepSeek-V4-Flash engine as the lab deploys it: TP 4 on H200s.
BASE_ARGS = ["--tp-size", "4", "--trust-remote-code"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Proc:
    """A child process with its output in a log file."""

    def __init__(self, argv: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.argv = argv
        self.log_path = log
        self._log = log.open("wb")
        self.popen = subprocess.Popen(
            argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def terminate(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, wait up to `timeout`, then SIGKILL the process group. Returns the exit code."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        return self.popen.returncode

    def kill(self) -> None:
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.popen.wait(5)
        self._log.close()


class Sim(Proc):
    def __init__(self, port: int, argv: list[str], log: Path, env: dict[str, str] | None) -> None:
        super().__init__(argv, log, env)
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    def wait_healthy(self, timeout: float = 10.0) -> None:
        wait_http_ok(self.url + "/health", timeout, self)


def wait_http_ok(url: str, timeout: float, proc: Proc | None = None) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if proc is not None and proc.popen.poll() is not None:
            raise AssertionError(f"process exited with {proc.popen.returncode}:\n{proc.log()}")
        try:
            r = httpx.get(url, timeout=1.0)
            if r.status_code == 200:
                return
            last = f"{r.status_code} {r.text[:200]}"
        except httpx.HTTPError as e:
            last = repr(e)
        time.sleep(0.05)
    raise AssertionError(f"{url} not ready after {timeout}s: {last}\n{proc.log() if proc else ''}")


def metrics_url(router: Proc) -> str:
    """The metrics page of a router Launcher.smg started."""
    return f"http://127.0.0.1:{router.argv[router.argv.index('--prometheus-port') + 1]}/metrics"


def post_together(urls: list[str], body: Mapping[str, object], spread_s: float = 5.0) -> list[int]:
    """POST `body` to every URL at once (one thread each, its connection open before a barrier) and return the status
    codes in order. Fails if the sends were more than `spread_s` apart, which a call of that length would outlast."""
    start = threading.Barrier(len(urls))
    sent: list[float] = []

    def post(url: str) -> int:
        with httpx.Client(timeout=60) as client:
            client.get(url.rsplit("/", 1)[0] + "/health")  # opens the connection
            start.wait(timeout=30)
            sent.append(time.monotonic())
            return client.post(url, json=body).status_code

    with ThreadPoolExecutor(len(urls)) as pool:
        codes = list(pool.map(post, urls))
    assert max(sent) - min(sent) < spread_s, f"the calls were not sent together: {max(sent) - min(sent):.1f} s apart"
    return codes


class Launcher:
    """Starts sims and smg routers; stops all of them in teardown."""

    def __init__(self, model_dir: Path, logs: Path) -> None:
        self.model_dir = model_dir
        self.logs = logs
        self.procs: list[Proc] = []

    def sim_argv(self, port: int, extra: list[str]) -> list[str]:
        return [
            sys.executable,
            "-m",
            "sglang_sim",
            "serve",
            "--model-path",
            str(self.model_dir),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            *BASE_ARGS,
            *extra,
        ]

    def sim(self, extra: list[str] | None = None, env: dict[str, str] | None = None, wait: bool = True) -> Sim:
        port = free_port()
        sim = Sim(port, self.sim_argv(port, extra or []), self.logs / f"sim-{port}.log", env)
        self.procs.append(sim)
        if wait:
            sim.wait_healthy()
        return sim

    def smg(self, args: list[str]) -> tuple[Proc, str]:
        port, metrics = free_port(), free_port()
        argv = [
            str(SMG),
            "launch",
            *args,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--prometheus-host",
            "127.0.0.1",
            "--prometheus-port",
            str(metrics),
            "--disable-tokenizer-autoload",
        ]
        proc = Proc(argv, self.logs / f"smg-{port}.log")
        self.procs.append(proc)
        url = f"http://127.0.0.1:{port}"
        wait_http_ok(url + "/readiness", 20.0, proc)
        return proc, url

    def pd_router(
        self, engine_args: list[str], router_args: list[str], env: dict[str, str] | None = None
    ) -> tuple[Proc, str]:
        """A simulated prefill and decode engine (each with `engine_args` and `env`) behind smg in PD mode (with
        `router_args`): (the router, its URL)."""
        bport = free_port()
        prefill = self.sim(
            [*engine_args, "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(bport)], env
        )
        decode = self.sim([*engine_args, "--disaggregation-mode", "decode"], env)
        return self.smg(
            ["--pd-disaggregation", "--prefill", prefill.url, str(bport), "--decode", decode.url, *router_args]
        )

    def close(self) -> None:
        for p in reversed(self.procs):
            p.kill()
