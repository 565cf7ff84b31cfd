"""The capacity chart (plugins/plugin_utils/sglang_chart.render_svg) pinned whole: the SVG text of three synthetic
charts, line by line. The plot spans x 70..600 and y 370 (a count of 1) up to 40 (1.2 x the largest limit or
fit); both axes are log2-scaled, so rows two octaves apart land at 70, 335 and 600."""

from __future__ import annotations

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_capacity import ConcurrencyRow
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_chart import render_svg

HEAD = [
    '<svg xmlns="http://www.w3.org/2000/svg" width="860" height="420" font-family="sans-serif" font-size="12">',
    '<rect width="860" height="420" fill="white"/>',
]
AXES = [
    '<line x1="70" y1="370" x2="600" y2="370" stroke="black"/>',
    '<line x1="70" y1="40" x2="70" y2="370" stroke="black"/>',
    '<text x="335.0" y="408" text-anchor="middle">per-call context (tokens, log scale)</text>',
    '<text x="16" y="205.0" transform="rotate(-90 16 205.0)" '
    'text-anchor="middle">concurrent requests (log scale)</text>',
]
DEFAULT_TITLE = (
    '<text x="70" y="22" font-size="14" font-weight="bold">Concurrent full-length requests vs per-call context</text>'
)


def svg(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


def test_every_series_limit_and_legend_entry() -> None:
    """Rows at 1Ki, 4Ki and 16Ki with fp8 figures on every row, max_running_requests 2048 (the largest: the top
    is 2457.6), a router cap of 512 and the declared context at the middle row: six legend entries 20 px apart,
    and the count that runs at the declared context (225) in bold beside the green marker."""
    rows = [
        ConcurrencyRow(1024, 900, 512, "router", 1000, 100),
        ConcurrencyRow(4096, 225, 225, "kv_pool", 250, 25),
        ConcurrencyRow(16384, 56, 56, "kv_pool", 62, 6),
    ]
    assert render_svg(rows, 4096, 2048, 512) == svg(
        [
            *HEAD,
            DEFAULT_TITLE,
            *AXES,
            '<text x="70.0" y="386" text-anchor="middle">1Ki</text>',
            '<text x="335.0" y="386" text-anchor="middle">4Ki</text>',
            '<text x="600.0" y="386" text-anchor="middle">16Ki</text>',
            '<text x="64" y="374.0" text-anchor="end">1</text>',
            '<line x1="70" y1="370.0" x2="600" y2="370.0" stroke="#eee"/>',
            '<text x="64" y="276.7" text-anchor="end">10</text>',
            '<line x1="70" y1="272.7" x2="600" y2="272.7" stroke="#eee"/>',
            '<text x="64" y="179.3" text-anchor="end">100</text>',
            '<line x1="70" y1="175.3" x2="600" y2="175.3" stroke="#eee"/>',
            '<text x="64" y="82.0" text-anchor="end">1000</text>',
            '<line x1="70" y1="78.0" x2="600" y2="78.0" stroke="#eee"/>',
            '<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="70.0,82.5 335.0,141.1 600.0,199.8"/>',
            '<polyline fill="none" stroke="#7fb3d5" stroke-width="2" stroke-dasharray="5,4" '
            'points="70.0,78.0 335.0,136.6 600.0,195.5"/>',
            '<polyline fill="none" stroke="#d62728" stroke-width="1.5" stroke-dasharray="2,3" '
            'points="70.0,47.7 600.0,47.7"/>',
            '<polyline fill="none" stroke="#9467bd" stroke-width="1.5" stroke-dasharray="8,3" '
            'points="70.0,106.3 600.0,106.3"/>',
            '<polyline fill="none" stroke="black" stroke-width="3.5" points="70.0,106.3 335.0,141.1 600.0,199.8"/>',
            '<line x1="335.0" y1="40" x2="335.0" y2="370" stroke="#2ca02c" stroke-width="2"/>',
            '<text x="331.0" y="52" text-anchor="end" fill="#2ca02c">context_length</text>',
            '<polyline fill="none" stroke="#1f77b4" stroke-width="2.5" points="612.0,50.0 640.0,50.0"/>',
            '<text x="646" y="54">KV pool fit (live keys)</text>',
            '<polyline fill="none" stroke="#7fb3d5" stroke-width="2.5" stroke-dasharray="5,4" '
            'points="612.0,70.0 640.0,70.0"/>',
            '<text x="646" y="74">KV pool fit, fp8 index keys</text>',
            '<polyline fill="none" stroke="#d62728" stroke-width="2.5" stroke-dasharray="2,3" '
            'points="612.0,90.0 640.0,90.0"/>',
            '<text x="646" y="94">max_running_requests 2048</text>',
            '<polyline fill="none" stroke="#9467bd" stroke-width="2.5" stroke-dasharray="8,3" '
            'points="612.0,110.0 640.0,110.0"/>',
            '<text x="646" y="114">router max_concurrent 512</text>',
            '<polyline fill="none" stroke="black" stroke-width="2.5" points="612.0,130.0 640.0,130.0"/>',
            '<text x="646" y="134">runs at once</text>',
            '<polyline fill="none" stroke="#2ca02c" stroke-width="2.5" points="612.0,150.0 640.0,150.0"/>',
            '<text x="646" y="154">declared context 4Ki</text>',
            '<text x="339.0" y="135.1" font-weight="bold">225</text>',
            "</svg>",
        ]
    )


def test_one_row_without_router_or_fp8_under_an_escaped_title() -> None:
    """A single row: the context axis has no span, so every x lands on the left axis, the declared context too
    (even though no row sits there: no bold count). The top is 1.2 x 64 = 76.8: ticks 1 and 10 only; 30 lands at
    370 - 330 x log2(30) / log2(76.8) = 111.5 and 64 at 53.9. No router cap, no fp8 figures: four legend entries."""
    rows = [ConcurrencyRow(131072, 30, 30, "kv_pool", None, None)]
    assert render_svg(rows, 65536, 64, title="decode <tp4> & fp8") == svg(
        [
            *HEAD,
            '<text x="70" y="22" font-size="14" font-weight="bold">decode &lt;tp4&gt; &amp; fp8</text>',
            *AXES,
            '<text x="70.0" y="386" text-anchor="middle">128Ki</text>',
            '<text x="64" y="374.0" text-anchor="end">1</text>',
            '<line x1="70" y1="370.0" x2="600" y2="370.0" stroke="#eee"/>',
            '<text x="64" y="199.0" text-anchor="end">10</text>',
            '<line x1="70" y1="195.0" x2="600" y2="195.0" stroke="#eee"/>',
            '<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="70.0,111.5"/>',
            '<polyline fill="none" stroke="#d62728" stroke-width="1.5" stroke-dasharray="2,3" '
            'points="70.0,53.9 600.0,53.9"/>',
            '<polyline fill="none" stroke="black" stroke-width="3.5" points="70.0,111.5"/>',
            '<line x1="70.0" y1="40" x2="70.0" y2="370" stroke="#2ca02c" stroke-width="2"/>',
            '<text x="66.0" y="52" text-anchor="end" fill="#2ca02c">context_length</text>',
            '<polyline fill="none" stroke="#1f77b4" stroke-width="2.5" points="612.0,50.0 640.0,50.0"/>',
            '<text x="646" y="54">KV pool fit (live keys)</text>',
            '<polyline fill="none" stroke="#d62728" stroke-width="2.5" stroke-dasharray="2,3" '
            'points="612.0,70.0 640.0,70.0"/>',
            '<text x="646" y="74">max_running_requests 64</text>',
            '<polyline fill="none" stroke="black" stroke-width="2.5" points="612.0,90.0 640.0,90.0"/>',
            '<text x="646" y="94">runs at once</text>',
            '<polyline fill="none" stroke="#2ca02c" stroke-width="2.5" points="612.0,110.0 640.0,110.0"/>',
            '<text x="646" y="114">declared context 64Ki</text>',
            "</svg>",
        ]
    )


def test_counts_of_one_or_none_floor_the_top_at_one() -> None:
    """Pool fits of 0 and 1, fp8 fits of 1 and max_running_requests 1: every limit and fit counts as at least 1,
    so the top is 1.2 and only the tick 1 is drawn; all of them lie on the x axis. The runs-at-once line does not
    set the top: its 2 (a synthetic row) lands at 370 - 330 / log2(1.2) = -884.6, above the plot."""
    rows = [
        ConcurrencyRow(1024, 0, 0, "kv_pool", 1, 1),
        ConcurrencyRow(2048, 1, 2, "kv_pool", 1, 0),
    ]
    assert render_svg(rows, 2048, 1) == svg(
        [
            *HEAD,
            DEFAULT_TITLE,
            *AXES,
            '<text x="70.0" y="386" text-anchor="middle">1Ki</text>',
            '<text x="600.0" y="386" text-anchor="middle">2Ki</text>',
            '<text x="64" y="374.0" text-anchor="end">1</text>',
            '<line x1="70" y1="370.0" x2="600" y2="370.0" stroke="#eee"/>',
            '<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="70.0,370.0 600.0,370.0"/>',
            '<polyline fill="none" stroke="#7fb3d5" stroke-width="2" stroke-dasharray="5,4" '
            'points="70.0,370.0 600.0,370.0"/>',
            '<polyline fill="none" stroke="#d62728" stroke-width="1.5" stroke-dasharray="2,3" '
            'points="70.0,370.0 600.0,370.0"/>',
            '<polyline fill="none" stroke="black" stroke-width="3.5" points="70.0,370.0 600.0,-884.6"/>',
            '<line x1="600.0" y1="40" x2="600.0" y2="370" stroke="#2ca02c" stroke-width="2"/>',
            '<text x="596.0" y="52" text-anchor="end" fill="#2ca02c">context_length</text>',
            '<polyline fill="none" stroke="#1f77b4" stroke-width="2.5" points="612.0,50.0 640.0,50.0"/>',
            '<text x="646" y="54">KV pool fit (live keys)</text>',
            '<polyline fill="none" stroke="#7fb3d5" stroke-width="2.5" stroke-dasharray="5,4" '
            'points="612.0,70.0 640.0,70.0"/>',
            '<text x="646" y="74">KV pool fit, fp8 index keys</text>',
            '<polyline fill="none" stroke="#d62728" stroke-width="2.5" stroke-dasharray="2,3" '
            'points="612.0,90.0 640.0,90.0"/>',
            '<text x="646" y="94">max_running_requests 1</text>',
            '<polyline fill="none" stroke="black" stroke-width="2.5" points="612.0,110.0 640.0,110.0"/>',
            '<text x="646" y="114">runs at once</text>',
            '<polyline fill="none" stroke="#2ca02c" stroke-width="2.5" points="612.0,130.0 640.0,130.0"/>',
            '<text x="646" y="134">declared context 2Ki</text>',
            '<text x="604.0" y="-890.6" font-weight="bold">2</text>',
            "</svg>",
        ]
    )
