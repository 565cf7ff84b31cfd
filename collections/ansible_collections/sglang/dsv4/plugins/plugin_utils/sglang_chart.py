"""SVG chart of concurrent full-length requests against per-call context length, with the declared limits marked.

Dependency-free: the audit report and the capacity command both call render_svg().
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape
from typing import Any

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_capacity import ConcurrencyRow

W, H = 860, 420
LEFT, RIGHT, TOP, BOTTOM = 70, 260, 40, 50


def _scale_log(value: float, lo: float, hi: float, start: float, end: float) -> float:
    if hi <= lo:
        return start
    return start + (math.log2(value) - math.log2(lo)) / (math.log2(hi) - math.log2(lo)) * (end - start)


def _polyline(points: Sequence[tuple[float, float]], color: str, width: float = 2, dash: str = "") -> str:
    coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    extra = f' stroke-dasharray="{dash}"' if dash else ""
    return f'<polyline fill="none" stroke="{color}" stroke-width="{width}"{extra} points="{coords}"/>'


def render_svg(
    rows: Sequence[ConcurrencyRow],
    declared_context: int,
    max_running: int,
    router_cap: int | None = None,
    title: str = "Concurrent full-length requests vs per-call context",
) -> str:
    """One chart: KV-pool fit (bf16 and fp8 index keys), the running-requests cap, the router cap, the
    declared context length; the bold line is what the engine can run at once."""
    if not rows:
        raise ValueError("render_svg needs at least one concurrency row")
    xs = [r.context_len for r in rows]
    ys: list[float] = []
    ys += [max(1, r.fit_in_pool) for r in rows]
    ys.append(max_running)
    ys += [max(1, r.fit_fp8_index) for r in rows if r.fit_fp8_index]
    if router_cap:
        ys.append(router_cap)
    x_lo, x_hi = min(xs), max(xs)
    y_lo, y_hi = 1, max(ys) * 1.2

    def px(x: float) -> float:
        return _scale_log(x, x_lo, x_hi, LEFT, W - RIGHT)

    def py(y: float) -> float:
        return _scale_log(max(y, 1), y_lo, y_hi, H - BOTTOM, TOP)

    parts: list[Any] = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
        f'<rect width="{W}" height="{H}" fill="white"/>',
        f'<text x="{LEFT}" y="22" font-size="14" font-weight="bold">{escape(title)}</text>',
        f'<line x1="{LEFT}" y1="{H - BOTTOM}" x2="{W - RIGHT}" y2="{H - BOTTOM}" stroke="black"/>',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{H - BOTTOM}" stroke="black"/>',
        f'<text x="{(LEFT + W - RIGHT) / 2}" y="{H - 12}" text-anchor="middle">'
        "per-call context (tokens, log scale)</text>",
        f'<text x="16" y="{(TOP + H - BOTTOM) / 2}" transform="rotate(-90 16 {(TOP + H - BOTTOM) / 2})" '
        'text-anchor="middle">concurrent requests (log scale)</text>',
    ]
    for x in xs:
        parts.append(f'<text x="{px(x):.1f}" y="{H - BOTTOM + 16}" text-anchor="middle">{_short(x)}</text>')
    tick = 1
    while tick <= y_hi:
        parts.append(f'<text x="{LEFT - 6}" y="{py(tick) + 4:.1f}" text-anchor="end">{_short(tick)}</text>')
        parts.append(f'<line x1="{LEFT}" y1="{py(tick):.1f}" x2="{W - RIGHT}" y2="{py(tick):.1f}" stroke="#eee"/>')
        tick *= 10
    legend: list[tuple[str, str, str]] = []
    parts.append(_polyline([(px(r.context_len), py(r.fit_in_pool)) for r in rows], "#1f77b4"))
    legend.append(("#1f77b4", "", "KV pool fit (live keys)"))
    if all(r.fit_fp8_index for r in rows):
        parts.append(_polyline([(px(r.context_len), py(r.fit_fp8_index or 1)) for r in rows], "#7fb3d5", 2, "5,4"))
        legend.append(("#7fb3d5", "5,4", "KV pool fit, fp8 index keys"))
    parts.append(_polyline([(LEFT, py(max_running)), (W - RIGHT, py(max_running))], "#d62728", 1.5, "2,3"))
    legend.append(("#d62728", "2,3", f"max_running_requests {max_running}"))
    if router_cap:
        parts.append(_polyline([(LEFT, py(router_cap)), (W - RIGHT, py(router_cap))], "#9467bd", 1.5, "8,3"))
        legend.append(("#9467bd", "8,3", f"router max_concurrent {router_cap}"))
    parts.append(_polyline([(px(r.context_len), py(r.concurrent)) for r in rows], "black", 3.5))
    legend.append(("black", "", "runs at once"))
    dx = px(declared_context)
    parts.append(f'<line x1="{dx:.1f}" y1="{TOP}" x2="{dx:.1f}" y2="{H - BOTTOM}" stroke="#2ca02c" stroke-width="2"/>')
    parts.append(f'<text x="{dx - 4:.1f}" y="{TOP + 12}" text-anchor="end" fill="#2ca02c">context_length</text>')
    legend.append(("#2ca02c", "", f"declared context {_short(declared_context)}"))
    for i, (color, dash, label) in enumerate(legend):
        y = TOP + 10 + i * 20
        parts.append(_polyline([(W - RIGHT + 12, y), (W - RIGHT + 40, y)], color, 2.5, dash))
        parts.append(f'<text x="{W - RIGHT + 46}" y="{y + 4}">{escape(label)}</text>')
    for r in rows:
        if r.context_len == declared_context:
            parts.append(
                f'<text x="{dx + 4:.1f}" y="{py(r.concurrent) - 6:.1f}" font-weight="bold">{r.concurrent}</text>'
            )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _short(n: float) -> str:
    n = int(n)
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20}Mi"
    if n >= 1024 and n % 1024 == 0:
        return f"{n >> 10}Ki"
    return str(n)
