"""An edge of the capacity chart's count axis (plugins/plugin_utils/sglang_chart.render_svg): when 1.2 x the largest
count is exactly a power of ten, that power is the top tick, drawn on the top of the plot. The row is synthetic."""

from __future__ import annotations

import re

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_capacity import ConcurrencyRow
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_chart import render_svg

# 8,333,333,333,333,333 x 1.2 rounds to exactly 1e16 in floating point: the axis top is a power of ten.
HUGE = 8_333_333_333_333_333


def test_an_axis_top_that_is_a_power_of_ten_gets_its_tick() -> None:
    svg = render_svg([ConcurrencyRow(4096, HUGE, HUGE, "kv_pool", None, None)], 4096, HUGE)
    labels = re.findall(r'<text x="64" y="([\d.]+)" text-anchor="end">([^<]+)</text>', svg)
    grid = re.findall(r'<line x1="70" y1="([\d.]+)" x2="600" y2="[\d.]+" stroke="#eee"/>', svg)
    assert len(labels) == len(grid) == 17  # 1, 10, ..., 1e16
    assert labels[0] == ("374.0", "1")
    assert labels[-1] == ("44.0", "9765625000000Ki")  # 1e16 = 9,765,625,000,000 x 1024
    assert (grid[0], grid[-1]) == ("370.0", "40.0")
