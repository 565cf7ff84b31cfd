"""The capacity chart (render_svg): where each series, limit, tick and legend entry lands on the 860x420 SVG,
with both axes log-scaled, and the short token labels (_short). Rows are synthetic ConcurrencyRow values."""

from __future__ import annotations

import math
from xml.etree import ElementTree

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_capacity import ConcurrencyRow
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_chart import _short, render_svg

SVG = "{http://www.w3.org/2000/svg}"
# The plot area: x from 70 (left margin) to 600 (860 less the 260 legend margin), y from 370 (420 less the
# 50 bottom margin) up to 40.
X0, X1, Y0, Y1 = 70, 600, 370, 40

# Synthetic rows at 1Ki, 4Ki and 16Ki tokens: two octaves apart, so they land at x 70, 335 and 600.
ROWS = [
    ConcurrencyRow(1024, 900, 512, "router", 1000, 100),
    ConcurrencyRow(4096, 225, 225, "kv_pool", 250, 25),
    ConcurrencyRow(16384, 56, 56, "kv_pool", 62, 6),
]
MAX_RUNNING, ROUTER_CAP = 2048, 512  # max_running_requests is the largest value: the y axis tops at 1.2x it


def _y(value: float, largest: float) -> str:
    """Where a count lands: log scale from 1 at the bottom to 1.2x the largest value drawn at the top."""
    return f"{Y0 + (Y1 - Y0) * math.log2(max(value, 1)) / math.log2(1.2 * largest):.1f}"


def _elements(svg: str) -> list[tuple[str, dict[str, str], str]]:
    root = ElementTree.fromstring(svg)
    return [(e.tag.removeprefix(SVG), dict(e.attrib), e.text or "") for e in root]


def _polylines(svg: str) -> list[tuple[str, str, str | None, str]]:
    """(stroke, stroke-width, dash pattern or None, points) of every polyline, in drawing order."""
    out = []
    for tag, a, _ in _elements(svg):
        if tag == "polyline":
            assert a["fill"] == "none"
            out.append((a["stroke"], a["stroke-width"], a.get("stroke-dasharray"), a["points"]))
    return out


def _texts(svg: str) -> list[tuple[str, str, str]]:
    return [(a["x"], a["y"], text) for tag, a, text in _elements(svg) if tag == "text"]


@pytest.fixture
def chart() -> str:
    return render_svg(ROWS, 4096, MAX_RUNNING, ROUTER_CAP)


def test_no_rows_is_an_error() -> None:
    """An empty concurrency table cannot be drawn."""
    with pytest.raises(ValueError, match=r"^render_svg needs at least one concurrency row$"):
        render_svg([], 4096, 64)


def test_one_element_per_line_and_a_final_newline(chart: str) -> None:
    """The SVG is written one element per line (diff-friendly in the audit report)."""
    lines = chart.split("\n")
    assert lines[-1] == ""
    assert lines[-2] == "</svg>"
    assert all(line.startswith("<") and line.endswith(">") for line in lines[:-1])
    assert len(lines) - 1 == len(_elements(chart)) + 2  # every child, plus the <svg> and </svg> lines


def test_frame_axes_and_axis_titles(chart: str) -> None:
    """Canvas, white background, default title, the two axes and their titles, at fixed places."""
    assert chart.split("\n")[:7] == [
        '<svg xmlns="http://www.w3.org/2000/svg" width="860" height="420" font-family="sans-serif" font-size="12">',
        '<rect width="860" height="420" fill="white"/>',
        '<text x="70" y="22" font-size="14" font-weight="bold">'
        "Concurrent full-length requests vs per-call context</text>",
        '<line x1="70" y1="370" x2="600" y2="370" stroke="black"/>',
        '<line x1="70" y1="40" x2="70" y2="370" stroke="black"/>',
        '<text x="335.0" y="408" text-anchor="middle">per-call context (tokens, log scale)</text>',
        '<text x="16" y="205.0" transform="rotate(-90 16 205.0)" text-anchor="middle">'
        "concurrent requests (log scale)</text>",
    ]


def test_a_given_title_is_escaped() -> None:
    """The title is the caller's text, XML-escaped."""
    svg = render_svg(ROWS, 4096, MAX_RUNNING, title="decode <tp4> & fp8")
    title = svg.split("\n")[2]
    assert title == '<text x="70" y="22" font-size="14" font-weight="bold">decode &lt;tp4&gt; &amp; fp8</text>'


def test_context_ticks_sit_under_each_row_on_a_log_scale(chart: str) -> None:
    """Each row's context length is a tick label below the x axis; 4Ki lies halfway between 1Ki and 16Ki."""
    ticks = [(x, y, t) for x, y, t in _texts(chart) if y == "386"]
    assert ticks == [("70.0", "386", "1Ki"), ("335.0", "386", "4Ki"), ("600.0", "386", "16Ki")]


def test_count_ticks_are_powers_of_ten_up_to_the_top(chart: str) -> None:
    """Labels 1, 10, 100, 1000 (the top is 1.2 x 2048) right-aligned left of the axis, each with a light grid
    line across the plot; 1 sits on the x axis."""
    elements = _elements(chart)
    labels = [(a["x"], a["y"], t) for tag, a, t in elements if tag == "text" and a.get("text-anchor") == "end"]
    grid = [(a["x1"], a["x2"], a["y1"], a["y2"]) for tag, a, _ in elements if a.get("stroke") == "#eee"]
    assert labels[:4] == [
        ("64", "374.0", "1"),
        ("64", f"{float(_y(10, MAX_RUNNING)) + 4:.1f}", "10"),
        ("64", f"{float(_y(100, MAX_RUNNING)) + 4:.1f}", "100"),
        ("64", "82.0", "1000"),
    ]
    assert grid == [("70", "600", y, y) for y in ("370.0", _y(10, MAX_RUNNING), _y(100, MAX_RUNNING), "78.0")]


def test_series_and_limits_are_drawn_with_their_styles(chart: str) -> None:
    """Pool fit (live keys) solid blue, fp8-index fit dashed light blue, max_running_requests and the router cap
    as dashed flat lines across the plot, and what runs at once as the bold black line."""
    top = MAX_RUNNING

    def line(values: list[int]) -> str:
        return " ".join(f"{x},{_y(v, top)}" for x, v in zip(("70.0", "335.0", "600.0"), values, strict=True))

    assert _polylines(chart)[:5] == [
        ("#1f77b4", "2", None, line([900, 225, 56])),
        ("#7fb3d5", "2", "5,4", line([1000, 250, 62])),
        ("#d62728", "1.5", "2,3", f"70.0,{_y(2048, top)} 600.0,{_y(2048, top)}"),
        ("#9467bd", "1.5", "8,3", f"70.0,{_y(512, top)} 600.0,{_y(512, top)}"),
        ("black", "3.5", None, line([512, 225, 56])),
    ]
    assert _y(2048, top) == "47.7" and _y(1000, top) == "78.0"


def test_legend_names_each_line_with_its_swatch(chart: str) -> None:
    """One legend entry per drawn line, 20 px apart from y 50 right of the plot: a 28 px swatch in the line's
    colour and dash, and its label 6 px after it."""
    entries = [
        ("#1f77b4", None, "KV pool fit (live keys)"),
        ("#7fb3d5", "5,4", "KV pool fit, fp8 index keys"),
        ("#d62728", "2,3", "max_running_requests 2048"),
        ("#9467bd", "8,3", "router max_concurrent 512"),
        ("black", None, "runs at once"),
        ("#2ca02c", None, "declared context 4Ki"),
    ]
    swatches = _polylines(chart)[5:]
    assert swatches == [
        (color, "2.5", dash, f"612.0,{50 + 20 * i}.0 640.0,{50 + 20 * i}.0")
        for i, (color, dash, _) in enumerate(entries)
    ]
    labels = [t for t in _texts(chart) if t[0] == "646"]
    assert labels == [("646", str(54 + 20 * i), label) for i, (_, _, label) in enumerate(entries)]


def test_declared_context_is_a_green_marker_with_the_concurrency_there(chart: str) -> None:
    """A vertical green line at the declared context, labelled left of it at the top, and the number of
    requests that run at once there, in bold right of it, just above the black line."""
    elements = _elements(chart)
    marker = [a for tag, a, _ in elements if tag == "line" and a.get("stroke") == "#2ca02c"]
    assert marker == [{"x1": "335.0", "y1": "40", "x2": "335.0", "y2": "370", "stroke": "#2ca02c", "stroke-width": "2"}]
    label = [(a, t) for tag, a, t in elements if a.get("fill") == "#2ca02c"]
    assert label == [({"x": "331.0", "y": "52", "text-anchor": "end", "fill": "#2ca02c"}, "context_length")]
    bold = [(a["x"], a["y"], t) for tag, a, t in elements if tag == "text" and a.get("font-weight") == "bold"]
    assert bold[1:] == [("339.0", f"{float(_y(225, MAX_RUNNING)) - 6:.1f}", "225")]


def test_a_declared_context_between_rows_gets_no_count() -> None:
    """The bold count is written only when a row sits exactly at the declared context."""
    svg = render_svg(ROWS, 8192, MAX_RUNNING, ROUTER_CAP)
    bold = [t for tag, a, t in _elements(svg) if tag == "text" and a.get("font-weight") == "bold"]
    assert bold == ["Concurrent full-length requests vs per-call context"]
    assert ("646", "154", "declared context 8Ki") in _texts(svg)  # the marker stays, at 8Ki
    assert [a["x1"] for tag, a, _ in _elements(svg) if a.get("stroke") == "#2ca02c" and tag == "line"] == ["467.5"]


def test_the_router_cap_can_set_the_top_of_the_axis() -> None:
    """With one row every point sits on the left axis; a router cap above everything else sets the top."""
    rows = [ConcurrencyRow(131072, 30, 30, "kv_pool", None, None)]
    svg = render_svg(rows, 131072, 64, 5000)
    assert _polylines(svg)[:3] == [
        ("#1f77b4", "2", None, f"70.0,{_y(30, 5000)}"),
        ("#d62728", "1.5", "2,3", f"70.0,{_y(64, 5000)} 600.0,{_y(64, 5000)}"),
        ("#9467bd", "1.5", "8,3", f"70.0,{_y(5000, 5000)} 600.0,{_y(5000, 5000)}"),
    ]
    assert [t for x, y, t in _texts(svg) if x == "64"] == ["1", "10", "100", "1000"]
    assert ("74.0", f"{float(_y(30, 5000)) - 6:.1f}", "30") in _texts(svg)
    assert ("70.0", "386", "128Ki") in _texts(svg)


def test_without_a_router_cap_or_a_complete_fp8_column_those_lines_are_left_out() -> None:
    """No router cap: no purple line or legend entry. An fp8 figure missing on any row: no fp8 line, though the
    figures given still count toward the top of the axis. A pool that fits nothing is drawn at 1."""
    rows = [
        ConcurrencyRow(1024, 40, 40, "kv_pool", 100, 60),
        ConcurrencyRow(65536, 0, 0, "kv_pool", None, None),
    ]
    svg = render_svg(rows, 65536, 32)
    assert _polylines(svg)[:3] == [
        ("#1f77b4", "2", None, f"70.0,{_y(40, 100)} 600.0,370.0"),
        ("#d62728", "1.5", "2,3", f"70.0,{_y(32, 100)} 600.0,{_y(32, 100)}"),
        ("black", "3.5", None, f"70.0,{_y(40, 100)} 600.0,370.0"),
    ]
    assert [t for x, y, t in _texts(svg) if x == "646"] == [
        "KV pool fit (live keys)",
        "max_running_requests 32",
        "runs at once",
        "declared context 64Ki",
    ]
    assert ("604.0", "364.0", "0") in _texts(svg)


@pytest.mark.parametrize(
    ("n", "label"),
    [
        (0, "0"),
        (1, "1"),
        (1000, "1000"),
        (1023, "1023"),
        (1024, "1Ki"),
        (1536, "1536"),
        (3072, "3Ki"),
        (4096.0, "4Ki"),
        (200_000, "200000"),
        (1 << 20, "1Mi"),
        ((1 << 20) + 1024, "1025Ki"),
        (3 << 20, "3Mi"),
        (1 << 21, "2Mi"),
    ],
)
def test_short_labels_use_binary_suffixes_only_for_exact_multiples(n: float, label: str) -> None:
    """Token counts print as Mi or Ki only when they are whole multiples of 2^20 or 2^10."""
    assert _short(n) == label
