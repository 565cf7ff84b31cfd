"""Long-context recall through the router: opt-in (--recall-probe, or sglang_verify_recall_probe: true).

Off by default in every inventory, the lab included: it sends twelve prompts of up to 22.6K tokens. The probe
program (probes/recall_probe.py, stdlib only, plus the core modules shipped with it) runs on the router host: needle
in a haystack at 4.5K, 8K, 12K and 22.6K tokens, three depths each. A DeepSeek-V4 engine that stores fp8 indexer
keys (upstream SGLang, or a deploy that lost SGLANG_DSV4_BF16_INDEX_K) misses the needles more than about 2,000
tokens back: the check catches that by behaviour, whatever the configuration says.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from verify_remote import HERE, RemoteError, program_archive, run_program
from verify_session import plan_of

RECALL_PROBE = HERE / "probes" / "recall_probe.py"
sys.path.insert(0, str(RECALL_PROBE.parent))
from recall_probe import failures  # noqa: E402


@pytest.fixture(scope="module")
def recall(request: pytest.FixtureRequest, runner: Any, host: Any) -> dict[str, Any]:
    plan = plan_of(runner, host.backend.host)
    if "router" not in plan.servers:
        pytest.skip(f"{plan.name} does not serve router (not in group sglang_router)")
    s = plan.settings
    wanted = request.config.getoption("recall_probe")
    if not (wanted or bool(s["sglang_verify_recall_probe"])):
        pytest.skip("the recall probe is off (sglang_verify_recall_probe is false; --recall-probe turns it on)")
    router = plan.servers["router"]
    timeout = float(s["sglang_verify_recall_timeout_secs"])
    config = {
        "url": router.base_url,
        "api_key_file": router.env_file,
        "route": s["sglang_verify_recall_route"],
        "timeout_s": timeout,
        # smg routes an OpenAI request by its model, and refuses one without it.
        "model": plan.model.get("served_name"),
    }
    # Twelve cases and a calibration, one at a time, each bounded by the request timeout.
    limit = int(13 * timeout) + 30
    python = s["sglang_verify_python"]
    out = run_program(host, program_archive(RECALL_PROBE), ".pyz", [json.dumps(config)], python, limit)
    if out.rc != 0:
        raise RemoteError(f"recall probe exited {out.rc}: {out.stderr.strip()[-2000:]}")
    result: dict[str, Any] = out.data
    return result


def test_recall_finds_every_needle(recall: dict[str, Any]) -> None:
    """Every needle comes back, at every length and depth."""
    missed = failures(recall)
    assert not missed, (
        f"{len(missed)} of {len(recall.get('cases') or [])} needles missed through {recall.get('url')} "
        f"({recall.get('route')}); fp8 indexer keys miss needles beyond about 2,000 tokens "
        "(is SGLANG_DSV4_BF16_INDEX_K set on both engines, and does /server_info report "
        "internal_states[].dsv4_index_k_dtype bf16?):\n" + "\n".join(missed)
    )
