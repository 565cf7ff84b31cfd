"""The time probe of the probe program (verify/probes/envelope_probe.py, `time`) against a simulated engine on
127.0.0.1: each streamed request's TTFT and ITL come from its own stream. Figures are printed, not bounded."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from verify_remote import PROBE

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sim"))
from simtools import MODEL_CONFIG, Launcher, Sim


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    model = tmp_path_factory.mktemp("model") / "DeepSeek-V4-Flash"
    model.mkdir()
    model.joinpath("config.json").write_text(MODEL_CONFIG.read_text())
    launcher = Launcher(model, tmp_path_factory.mktemp("logs"))
    try:
        yield launcher.sim(
            ["--context-length", "8192"], {"SGLANG_SIM_TOKENS_PER_SEC": "200", "SGLANG_SIM_STEP_MS": "5"}
        )
    finally:
        launcher.close()


def test_each_request_reports_its_ttft_and_itl(engine: Sim) -> None:
    config = {
        "router": engine.url,
        "token_id": 100,
        "deadline_s": 30,
        "time": {"requests": 3, "input_tokens": 1000, "output_tokens": 32, "timeout_s": 20},
    }
    proc = subprocess.run(
        [sys.executable, str(PROBE), json.dumps(config)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)["time"]
    assert (found["input_tokens"], found["output_tokens"], len(found["results"])) == (1000, 32, 3)
    for run in found["results"]:
        assert (run["status"], run["done"], run["completion_tokens"], run["last_tokens"]) == (200, True, 32, 32)
        assert 1 <= run["first_tokens"] < 32 and run["chunks"] >= 2
        assert run["ttft_s"] == run["first_s"] > 0
        assert run["itl_s"] == pytest.approx((run["last_s"] - run["first_s"]) / (32 - run["first_tokens"]))
        print(f"TTFT {run['ttft_s'] * 1000:.1f} ms, ITL {run['itl_s'] * 1000:.2f} ms over {run['chunks']} chunks")
