"""Two real smg 1.13.0 routers joined in smg's HA mesh (`--enable-mesh`) in front of one simulated PD pair: each router
admits its own `max_concurrent_requests`, and the mesh shares no admission count. So N routers admit the sum of
their caps, which is what the planner counts (sglang_plan.fleet_fit: the router cap is the sum when every router
declares one). The mesh is seen up (each router's log names the other Alive) before the calls are sent."""

from __future__ import annotations

import re
import time
from collections import Counter
from pathlib import Path

from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_plan import Fleet, fleet_fit
from sglang_envelope_cli.commands import load_inventory, model_config_for
from simtools import Launcher, free_port, post_together

SLOW = {"SGLANG_SIM_TTFT_MS": "300", "SGLANG_SIM_TOKENS_PER_SEC": "20", "SGLANG_SIM_STEP_MS": "20"}
COMMON = ["--served-model-name", "dsv4", "--context-length", "8192", "--max-running-requests", "16"]
CAP = 2  # each router's max_concurrent_requests
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def wait_alive(log: Path, peer: str, port: int, timeout: float = 30.0) -> None:
    """Until the router's log reports the peer router Alive at its mesh address."""
    seen = re.compile(rf'name: "{peer}", address: "127\.0\.0\.1:{port}", status: Alive')
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if seen.search(ANSI.sub("", log.read_text(errors="replace"))):
            return
        time.sleep(0.2)
    raise AssertionError(f"{log.name}: the mesh never reported {peer} Alive:\n{log.read_text()[-3000:]}")


def test_meshed_routers_each_admit_their_own_cap_and_the_planner_sums_them(launcher: Launcher) -> None:
    bport = free_port()
    prefill = launcher.sim([*COMMON, "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(bport)],
                           SLOW)  # fmt: skip
    decode = launcher.sim([*COMMON, "--disaggregation-mode", "decode"], SLOW)
    mesh = {"rA": free_port(), "rB": free_port()}
    routers = {}
    for name, peer in (("rA", "rB"), ("rB", "rA")):
        routers[name] = launcher.smg(
            ["--pd-disaggregation", "--prefill", prefill.url, str(bport), "--decode", decode.url,
             "--policy", "round_robin", "--max-concurrent-requests", str(CAP), "--queue-size", "0",
             "--enable-mesh", "--mesh-server-name", name, "--mesh-host", "127.0.0.1",
             "--mesh-advertise-host", "127.0.0.1", "--mesh-port", str(mesh[name]),
             "--mesh-peer-urls", f"127.0.0.1:{mesh[peer]}"]
        )  # fmt: skip
    wait_alive(routers["rA"][0].log_path, "rB", mesh["rB"])
    wait_alive(routers["rB"][0].log_path, "rA", mesh["rA"])

    # An admitted call runs 0.3 s + 120 tokens at 20 tokens/s = 6.3 s, longer than the sends may spread.
    body = {"text": "hello world", "sampling_params": {"max_new_tokens": 120, "ignore_eos": True}}
    names = [n for n in ("rA", "rB") for _ in range(2 * CAP)]  # twice each cap at once, on each router
    codes = Counter(zip(names, post_together([routers[n][1] + "/generate" for n in names], body), strict=True))
    assert codes == {("rA", 200): CAP, ("rA", 429): CAP, ("rB", 200): CAP, ("rB", 429): CAP}, codes

    # The planner on a fleet of two routers, each declaring that cap, in front of decode engines with room to spare.
    hostvars, groups = load_inventory(str(Path(__file__).resolve().parents[3] / "inventories" / "multinode"))
    router = groups["sglang_router"][0]
    hostvars = {h: dict(v) for h, v in hostvars.items()}
    hostvars[router]["sglang_router"] = {**hostvars[router]["sglang_router"], "max_concurrent_requests": CAP}
    hostvars["router-02"] = {**hostvars[router], "inventory_hostname": "router-02"}
    groups = {**groups, "sglang_router": [router, "router-02"]}
    fit = fleet_fit(Fleet(hostvars, groups), model_config_for(hostvars[router]), 4000)
    admitted = sum(n for (_name, code), n in codes.items() if code == 200)
    assert fit.router_cap == admitted == 2 * CAP
