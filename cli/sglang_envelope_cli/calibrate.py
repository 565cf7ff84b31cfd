"""`sglang-envelope calibrate --inventory inventories/production [--from-live [REPORT]] [--write]`: the fleet's
measured points (sglang_perf_measured) with the calibration fitted on them, each point measured against what the
time model predicts for it, uncalibrated and calibrated with its band; --from-live adds the audit's live measurement
as points (sglang_perf_calibration.live_points), and --write appends them to the inventory's declaration.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_perf_fleet as perf
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_calibration import (
    VARIABLE,
    CalibratedSteps,
    MeasuredPoint,
    as_declared,
    live_points,
)
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_live import LiveFigures, measured_of
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_plan import Fleet, PlanError, fleet_from_inventory
from ruamel.yaml import YAML

from .output import ANSWERED, OUT


def point_lines(steps: CalibratedSteps) -> list[str]:
    """Each point of the calibration: measured, predicted uncalibrated, calibrated with its band, the residual."""
    cal = steps.calibration
    lines = []
    for n, fitted in enumerate(cal.fitted, 1):
        p = fitted.point
        factor = cal.factors[p.stage]
        ms = fitted.calibrated_ms(factor)
        band = cal.band(p.stage, *p.at)
        part = ms - fitted.fixed_ms
        low, high = ms - band.rel * part, ms + band.rel * part
        lines += [
            f"point {n}: {p.text()}",
            f"    measured {p.ms:,.2f} ms; predicted {fitted.predicted_ms:,.2f} ms uncalibrated, {ms:,.2f} ms "
            f"calibrated ({low:,.2f}-{high:,.2f}); residual {cal.residual(fitted):+.1%}",
        ]
    return lines


def declaring_file(inventory: Path) -> Path:
    """The group_vars/all file of the inventory that declares the measured points, else group_vars/all/perf.yml."""
    folder = (inventory if inventory.is_dir() else inventory.parent) / "group_vars" / "all"
    for path in sorted(folder.glob("*.yml")):
        if path.is_symlink():  # the shared envelope, linked into every inventory
            continue
        if any(line.startswith(f"{VARIABLE}:") for line in path.read_text().splitlines()):
            return path
    return folder / "perf.yml"


def write_points(path: Path, points: Sequence[MeasuredPoint]) -> None:
    """Append `points` to the list `path` declares (comments kept), or start it."""
    yaml = YAML()
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.width = 120
    data = yaml.load(path.read_text()) if path.exists() else None
    if data is None:
        data = yaml.load("---\n{}\n")
    data.setdefault(VARIABLE, [])
    data[VARIABLE].extend(as_declared(p) for p in points)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as out:
        yaml.dump(data, out)


def calibrate_command(
    inventory: str,
    load_inventory: Callable[[str], tuple[dict[str, Any], dict[str, list[str]]]],
    model_config_for: Callable[[Mapping[str, Any]], dict[str, Any]],
    steps: Any,
    reports: Path,
    from_live: str | None,
    write: bool,
) -> int:
    hostvars, groups = load_inventory(inventory)
    fleet: Fleet = fleet_from_inventory(hostvars, groups)
    engines = fleet.hosts("decode")[:1] or fleet.hosts("prefill")[:1]
    if not engines:
        raise PlanError(f"{inventory} declares no engine host; fix: add hosts to sglang_decode")
    if steps is None:
        raise PlanError(f"calibration compares the fleet with predicted times, and {perf.NOT_PREDICTED}")
    new: list[MeasuredPoint] = []
    if from_live is not None:
        all_engines = sorted(set(fleet.hosts("prefill") + fleet.hosts("decode")))
        report = Path(from_live) if from_live else _newest(reports, all_engines)
        report = report / "audit.json" if report.is_dir() else report
        new = live_points(LiveFigures.of(measured_of(report, all_engines)))
        for host in fleet.hostvars:
            declared = list(fleet.hostvars[host].get(VARIABLE) or [])
            fleet.hostvars[host][VARIABLE] = declared + [as_declared(p) for p in new]
    config = model_config_for(hostvars[engines[0]])
    calibrated = perf.fleet_steps(fleet, config, steps) or steps
    OUT.say(perf.time_header(calibrated))
    OUT.put("time_from", perf.time_source(calibrated))
    OUT.put("calibrated", isinstance(calibrated, CalibratedSteps))
    if not isinstance(calibrated, CalibratedSteps):
        OUT.say(f"no measured point: declare {VARIABLE} (docs/time.md) or pass --from-live after an audit")
        OUT.put("points", [])
        return ANSWERED
    OUT.say("\n".join(point_lines(calibrated)))
    OUT.put("factors", calibrated.calibration.factors)
    OUT.put(
        "points",
        [
            as_declared(f.point) | {"residual": calibrated.calibration.residual(f)}
            for f in calibrated.calibration.fitted
        ],
    )
    if new and write:
        target = declaring_file(Path(inventory))
        write_points(target, new)
        OUT.say(f"{len(new)} point(s) from the live fleet appended to {VARIABLE} in {target}")
        OUT.put("written_to", str(target))
    elif new:
        OUT.say(f"{len(new)} point(s) from the live fleet shown, not written (--write appends them to the inventory)")
    return ANSWERED


def _newest(reports: Path, engines: Sequence[str]) -> Path:
    for report in sorted(reports.glob("audit-*/audit.json"), reverse=True):
        try:
            measured_of(report, engines)
        except ValueError:
            continue
        return report
    raise PlanError(f"no audit report under {reports} measured this fleet's engines; fix: ansible-playbook audit.yml")


HELP = "the fleet's measured points and the time model's calibration to them"


def add_options(cal: Any) -> None:
    cal.add_argument(
        "--from-live",
        nargs="?",
        const="",
        metavar="REPORT",
        help="add the audit's live measurement as points (an audit report folder or its audit.json; default the "
        "newest reports/audit-*/ of this inventory's engines)",
    )
    cal.add_argument("--write", action="store_true", help="append the live points to the inventory's declaration")
