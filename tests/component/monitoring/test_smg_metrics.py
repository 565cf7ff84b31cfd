"""Every `smg_` metric the rules and the dashboard read is exported by the real smg 1.13.0 router, with the labels
they select on: the router runs in front of two simulated engines, is driven past its admission limits, and its
metrics port is scraped."""

from __future__ import annotations

import concurrent.futures
import re
import time
from typing import Any

import httpx
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_alerts import Policy, all_alerts, fleet
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_dashboard import build
from promtools import parse_exposition
from sglang_envelope_cli.commands import model_config_for
from simtools import Launcher, metrics_url, post_together

SLOW = {"SGLANG_SIM_TTFT_MS": "300", "SGLANG_SIM_TOKENS_PER_SEC": "20", "SGLANG_SIM_STEP_MS": "20"}
COMMON = ["--served-model-name", "dsv4", "--context-length", "8192", "--max-running-requests", "16", "--enable-metrics"]


def _names(lab_inventory: Any) -> set[str]:
    hostvars, groups = lab_inventory
    fl = fleet(hostvars, groups, model_config_for(hostvars["lab1"]))
    policy = Policy(ttft_p99_slo_s=2.0, availability_slo=0.995)
    exprs = [a.expr for alerts in all_alerts(fl, policy).values() for a in alerts]
    exprs += [t["expr"] for p in build(fl, policy)["panels"] for t in p.get("targets", [])]
    return {n for e in exprs for n in re.findall(r"\b(smg_[A-Za-z_]+)", e)}


def test_smg_exports_what_the_rules_read(launcher: Launcher, lab_inventory: Any) -> None:
    router, url = launcher.pd_router(
        COMMON, ["--policy", "round_robin", "--max-concurrent-requests", "1", "--queue-size", "1"], SLOW
    )
    metrics = metrics_url(router)
    # One call runs (0.3 s + 60 tokens at 20 tokens/s = 3.3 s), one waits, two are refused; the pages see them.
    body = {"text": "hello world", "sampling_params": {"max_new_tokens": 60, "ignore_eos": True}}
    pages: list[str] = []
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        calls = pool.submit(post_together, [url + "/generate"] * 4, body, 3.0)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not calls.done():
            pages.append(httpx.get(metrics, timeout=5).text)
            time.sleep(0.05)
        codes = sorted(calls.result())
    pages.append(httpx.get(metrics, timeout=5).text)
    assert 429 in codes and 200 in codes, codes

    seen: dict[str, float] = {}
    for page in pages:
        for series, value in parse_exposition(page)[0].items():
            seen[series] = max(value, seen.get(series, value))
    families = {s.split("{", 1)[0] for s in seen}
    missing = sorted(_names(lab_inventory) - families)
    assert not missing, f"smg 1.13.0 does not export {missing}"
    assert any(s.startswith("smg_http_responses_total{") and 'status_code="429"' in s for s in seen)
    assert max(v for s, v in seen.items() if s.startswith("smg_admission_inflight")) >= 1
    assert max(v for s, v in seen.items() if s.startswith("smg_admission_queue_depth")) >= 1
    assert sum(v for s, v in seen.items() if s.startswith("smg_worker_health{")) == 2
