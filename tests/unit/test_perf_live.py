"""The live fleet as the time model's step source (plugin_utils/sglang_perf_live.py): figures from the audit's
measured latency (the simulator's captured /metrics pages), answers proportional or shaped by another source, the
audit report it reads, and `sglang-envelope plan --from-live`. Expected values are written out by hand."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import sglang_envelope_cli.commands as cli
import yaml
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_engine_live import parse_latency
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_latency import measure
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_perf_fleet as perf
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf import (
    DecodeQuery,
    PrefillQuery,
    StepTime,
    Workload,
    predict_many,
)
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_live import (
    LiveFigures,
    LiveFiguresMissing,
    LiveSteps,
    live_steps,
)
from shipped import shipped_inventory
from test_perf_fleet import DSV4, production

FIXTURES = Path(__file__).resolve().parent / "audit" / "fixtures"
AT = "2026-12-03T08:40:00Z"
# The fixtures: 24 requests, 37,000 prompt tokens on each engine; prefill TTFT sum 5.147261219992288 s; decode ITL
# sum 7.5116932909950265 s over 744 tokens, 768 generated tokens.
PREFILL_MS_PER_TOKEN = 5.147261219992288 / 37000 * 1000
STEP_MS = 7.5116932909950265 / 744 * 1000


def latency(role: str) -> dict[str, Any]:
    return parse_latency((FIXTURES / f"metrics_sim_{role}.txt").read_text())


def measured(running: float = 2, decode: dict[str, Any] | None = None, host: str = "lab1") -> dict[str, Any]:
    engines = [
        {"host": host, "role": "prefill", "latency": latency("prefill"), "running": 0},
        {"host": host, "role": "decode", "latency": decode or latency("decode"), "running": running},
    ]
    return measure(engines, at=AT)


def test_figures_of_the_measured_fleet() -> None:
    f = LiveFigures.of(measured())
    assert f.prefill_tokens_per_s == pytest.approx(37000 / 5.147261219992288)  # 7,188 tokens/s
    assert f.decode_step_ms == pytest.approx(STEP_MS)  # 10.10 ms
    assert (f.batch, f.context, f.at) == (2.0, 1558, AT)  # 1,542 + 32 / 2
    assert f.source == "/metrics, since each engine started"


def test_without_itl_the_step_comes_from_e2e_and_ttft() -> None:
    no_itl = {k: v for k, v in latency("decode").items() if k != "itl"}
    f = LiveFigures.of(measured(decode=no_itl))
    # (E2E mean - TTFT mean) / 31: E2E sum 12.705045983992022 s, TTFT sum 5.193352692996996 s, 24 requests
    assert f.decode_step_ms == pytest.approx((12.705045983992022 - 5.193352692996996) / 24 / 31 * 1000)
    assert f.decode_basis.startswith("(E2E mean - TTFT mean) / 31 tokens of 24 requests (no ITL histogram)")


def test_missing_figures_say_what_to_do() -> None:
    with pytest.raises(LiveFiguresMissing, match="no finished request with a TTFT on the prefill engines"):
        LiveFigures.of(measure([]))


def test_proportional_answers() -> None:
    steps = LiveSteps(LiveFigures.of(measured()))
    (chunk, batch) = steps.prefill([PrefillQuery("m", 4, 4, 8192, 4096, 1), PrefillQuery("m", 4, 4, 1000, 0, 2)])
    assert chunk.ms == pytest.approx(4096 * PREFILL_MS_PER_TOKEN)  # the 4,096 tokens the pass computes
    assert batch.ms == pytest.approx(2000 * PREFILL_MS_PER_TOKEN)
    assert [s.ms for s in steps.decode([DecodeQuery("m", 4, 4, 100_000, 32)])] == [pytest.approx(STEP_MS)]
    assert (chunk.origin, chunk.attention_ms, chunk.measured_ms) == (f"live fleet (measured {AT})", 0.0, chunk.ms)


class Shape:
    """A shape source: prefill 0.1 ms per computed token plus 1e-5 ms x isl^2, decode 5 + 0.5 x batch +
    context / 1000 ms; counts its rounds."""

    def __init__(self) -> None:
        self.rounds = 0

    def both(
        self, prefills: Sequence[PrefillQuery], decodes: Sequence[DecodeQuery]
    ) -> tuple[list[StepTime], list[StepTime]]:
        self.rounds += 1
        p = [0.1 * q.batch * (q.isl - q.prefix) + 1e-5 * q.isl**2 for q in prefills]
        d = [5 + 0.5 * q.batch + q.context / 1000 for q in decodes]
        return [StepTime(ms, ms, 0, 0, 0, "shape") for ms in p], [StepTime(ms, ms, 0, 0, 0, "shape") for ms in d]

    def prefill(self, queries: Sequence[PrefillQuery]) -> list[StepTime]:
        return self.both(queries, [])[0]

    def decode(self, queries: Sequence[DecodeQuery]) -> list[StepTime]:
        return self.both([], queries)[1]


def test_shaped_answers_keep_the_estimators_growth_at_the_fleets_level() -> None:
    shape = Shape()
    steps = LiveSteps(LiveFigures.of(measured()), shape)
    prefills, decodes = steps.both([PrefillQuery("m", 4, 4, 16384, 8192, 1)], [DecodeQuery("m", 4, 4, 100_000, 32)])
    # the measured points: a 1,542-token prompt in 1,542 x PREFILL_MS_PER_TOKEN ms, where the shape says
    # 154.2 + 1e-5 x 1,542^2 ms; a step of STEP_MS at batch 2, context 1,558, where it says 5 + 1 + 1.558 ms
    p_scale = 1542 * PREFILL_MS_PER_TOKEN * (1541.6666666666667 / 1542) / (154.2 + 1e-5 * 1542**2)
    d_scale = STEP_MS / (5 + 1 + 1.558)
    assert prefills[0].ms == pytest.approx((819.2 + 1e-5 * 16384**2) * p_scale)
    assert decodes[0].ms == pytest.approx((5 + 16 + 100) * d_scale)
    assert shape.rounds == 1  # the queries and the measured points in one round


def test_the_time_model_on_live_steps() -> None:
    hostvars, groups = production()  # KV transfer declared free
    shape = perf.fleet_shape_of(hostvars, groups, DSV4, 1574)
    (pred,) = predict_many([(shape, Workload(isl=1542, osl=32, concurrency=1))], LiveSteps(LiveFigures.of(measured())))
    assert pred.ttft_p50.ms == pytest.approx(1542 * PREFILL_MS_PER_TOKEN)  # one pass, no bf16 term on live times
    assert pred.itl_p50.ms == pytest.approx(STEP_MS)
    assert pred.ttft_p50.source.startswith(f"live fleet (measured {AT}) (100% measured)")


def write_report(folder: Path, data: dict[str, Any]) -> Path:
    folder.mkdir(parents=True)
    (folder / "audit.json").write_text(json.dumps({"fleet": {"measured_time": data}}))
    return folder


def test_the_newest_report_of_this_fleet_is_read(tmp_path: Path) -> None:
    write_report(tmp_path / "audit-20261203T080000Z", measured(running=4))
    write_report(tmp_path / "audit-20261203T090000Z", measured(host="lab2"))  # newer, another fleet's
    assert live_steps(None, tmp_path, ["lab1"]).figures.batch == 4.0
    with pytest.raises(LiveFiguresMissing, match="measured engines on lab2, which this inventory does not declare"):
        live_steps(tmp_path / "audit-20261203T090000Z", tmp_path, ["lab1"])
    with pytest.raises(LiveFiguresMissing, match=r"no audit report under .* measured this fleet's engines"):
        live_steps(None, tmp_path, ["gpu-node-01"])


@pytest.fixture
def lab(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    inventory = shipped_inventory("lab")  # resolved before the command's reader is replaced
    monkeypatch.setattr(cli, "load_inventory", lambda _inventory: inventory)
    monkeypatch.setattr(cli, "time_steps", lambda: None)  # proportional: no estimator in the unit tests
    return lambda: None


def test_plan_from_live_names_its_source(lab: Callable[[], None], tmp_path: Path, capsys: Any) -> None:
    report = write_report(tmp_path / "audit-20261203T080000Z", measured())
    rc = cli.main(["plan", "-i", "inventories/lab", "--want", "1x4k", "--from-live", str(report)])
    out = capsys.readouterr().out
    assert rc == 0
    assert out.startswith(
        "time from: live fleet (prefill 7,188 tokens/s per engine: 1,542 prompt tokens per request over a TTFT mean "
        "of 0.214 s on the prefill engines (24 requests); decode 10.10 ms per step: the ITL mean of 744 tokens at "
        "batch 2 and context 1,558; /metrics, since each engine started; measured 2026-12-03T08:40:00Z; prefill "
        "time proportional to its tokens, the decode step the same at any batch and context)\n"
    )
    assert "ITL p50 10.10 ms" in out and "live fleet (measured 2026-12-03T08:40:00Z)" in out


def test_plan_from_live_without_a_measurement_fails_with_the_fix(
    lab: Callable[[], None], tmp_path: Path, capsys: Any
) -> None:
    write_report(tmp_path / "audit-x", {"roles": {}})
    assert cli.main(["plan", "-i", "inventories/lab", "--want", "1x4k", "--from-live", str(tmp_path / "audit-x")]) == 2
    assert "holds no measured latency" in capsys.readouterr().err
    assert cli.main(["--no-time", "plan", "-i", "inventories/lab", "--want", "1x4k", "--from-live"]) == 2
    assert "--from-live asks for time, --no-time leaves it out" in capsys.readouterr().err


def test_calibrate_adds_the_audits_live_measurement_to_the_inventory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: Any
) -> None:
    """calibrate --from-live REPORT --write: the audit's figures become a decode step of 10.10 ms at batch 2 and
    context 1,558 and a prefill pass of 1,542 tokens in 214.5 ms (37,000 tokens over 5.147 s of TTFT, per 1,542);
    against a stub answering 10 ms a step and 1,000 ms a pass, decode x1.010 and prefill x0.2145, each from its one
    point; the two points are appended to the inventory's group_vars/all/perf.yml, started since none declares
    them."""
    from test_perf_fleet import Stub

    inventory = shipped_inventory("lab")
    monkeypatch.setattr(cli, "load_inventory", lambda _inventory: inventory)
    monkeypatch.setattr(cli, "time_steps", Stub)
    report = write_report(tmp_path / "reports" / "audit-20261203T080000Z", measured())
    (tmp_path / "inv").mkdir()
    argv = ["calibrate", "-i", str(tmp_path / "inv"), "--from-live", str(report), "--write", "--json"]
    assert cli.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    # a request's prompt is 37,000 / 24 tokens: its pass 5,147.26 / 24 = 214.47 ms, over the stub's 1,000 ms
    factors = {
        "prefill": pytest.approx(5.147261219992288 / 24, rel=1e-4),
        "decode": pytest.approx(STEP_MS / 10, rel=1e-4),
    }
    assert out["factors"] == factors  # fitted on the points as declared, to 3 decimals of a millisecond
    written = yaml.safe_load((tmp_path / "inv" / "group_vars" / "all" / "perf.yml").read_text())
    points = written["sglang_perf_measured"]
    assert [(p["figure"], p.get("batch"), p.get("context"), p.get("input_tokens")) for p in points] == [
        ("decode_step", 2, 1558, None),
        ("prefill_pass", None, None, 1542),
    ]
