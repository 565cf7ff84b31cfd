"""Verdicts on the envelope probe's results (probes/envelope_probe.py), shared by the verify suite and the
unit tests that run the probe against fake routers on loopback. Stdlib only."""

from __future__ import annotations

from typing import Any


def describe(items: list[dict[str, Any]]) -> str:
    """'3x 200, 1x 429': the outcomes of a list of requests."""
    counts: dict[str, int] = {}
    for r in items:
        key = str(r.get("status")) if r.get("status") is not None else (r.get("error") or "no answer")[:60]
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{n}x {k}" for k, n in sorted(counts.items()))


def rejection_problems(par: dict[str, Any], reject_s: float) -> list[str]:
    """What is wrong with the requests sent beyond max_concurrent_requests + queue_size: each one must get
    429, and within `reject_s` seconds. An empty list is a pass."""
    wave2 = par.get("wave2") or []
    if not (len(wave2) == par.get("extra", 0) > 0):
        return [f"{len(wave2)} extra requests sent, {par.get('extra')} planned"]
    problems = []
    if not all(r.get("status") == 429 for r in wave2):
        problems.append(
            f"{len(wave2)} requests over the admission window ({par['max_concurrent']} + {par['queue_size']}, "
            f"sent {par.get('wave2_at_s')} s after the window filled): {describe(wave2)}, expected 429 each"
        )
    slow = [r["seconds"] for r in wave2 if (r.get("seconds") or 0) >= reject_s]
    if slow:
        problems.append(f"429 took {max(slow)} s (bound {reject_s} s)")
    return problems


def admission_problems(par: dict[str, Any]) -> list[str]:
    """What is wrong with the first wave (max_concurrent_requests + queue_size requests): each must get 200."""
    wave1 = par.get("wave1") or []
    if not wave1:
        return ["no parallel request was sent"]
    bad = [r for r in wave1 if r.get("status") != 200]
    if not bad:
        return []
    return [
        f"{len(bad)} of {len(wave1)} parallel requests (max_concurrent_requests {par['max_concurrent']} + "
        f"queue_size {par['queue_size']}) were not served: {describe(wave1)}; e.g. {bad[0]}"
    ]
