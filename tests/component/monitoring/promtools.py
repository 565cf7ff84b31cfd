"""promtool runs and promtool test series built from scrapes of a real /metrics page."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_alerts import Alert


def run_promtool(promtool: str, *args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *args], cwd=cwd, input=stdin, capture_output=True, text=True, timeout=300)


def write(path: Path, data: Any) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False, width=1000))
    return path


def parse_exposition(text: str) -> tuple[dict[str, float], dict[str, str]]:
    """({series selector: value}, {family: type}) of a Prometheus text page."""
    values: dict[str, float] = {}
    types: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
        elif line and not line.startswith("#"):
            series, _, value = line.rpartition(" ")
            values[series] = float(value)
    return values, types


def _family(series: str, types: Mapping[str, str]) -> str:
    name = series.split("{", 1)[0]
    for suffix in ("_total", "_bucket", "_count", "_sum", ""):
        if suffix and name.endswith(suffix) and name[: -len(suffix)] in types:
            return name[: -len(suffix)]
    return name


def _with_labels(series: str, labels: Mapping[str, str]) -> str:
    name, _, rest = series.partition("{")
    inner = rest.rstrip("}")
    extra = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{name}{{{extra}{',' + inner if inner else ''}}}"


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(v)


def series_from_scrapes(
    pages: Sequence[str], labels: Mapping[str, str], hold_minutes: int, up: bool = True
) -> list[dict[str, str]]:
    """promtool input series: scrape i is minute i; after the last scrape, gauges hold their last value and
    counters keep the last step's increase (the profile goes on as observed) for `hold_minutes`."""
    parsed = [parse_exposition(p) for p in pages]
    types = parsed[-1][1]
    out = []
    for series in parsed[-1][0]:
        points = [vals.get(series) for vals, _ in parsed]
        if any(p is None for p in points):
            continue
        values = [float(p) for p in points if p is not None]
        counter = types.get(_family(series, types)) in ("counter", "histogram")
        step = values[-1] - values[-2] if counter and len(values) > 1 else 0.0
        text = " ".join(_num(v) for v in values) + f" {_num(values[-1] + step)}+{_num(step)}x{hold_minutes}"
        out.append({"series": _with_labels(series, labels), "values": text})
    total = len(pages) + hold_minutes
    out.append({"series": _with_labels("up", labels), "values": f"{1 if up else 0}x{total}"})
    return out


def expectation(alert: Alert) -> dict[str, Any]:
    """The alert as promtool reports it when it fires."""
    labels = {"server": alert.server} if alert.server else {}
    return {
        "exp_labels": {**labels, **alert.labels},
        "exp_annotations": {"summary": alert.summary, "description": alert.description},
    }
