"""Contract: every rendered serve script parses with the real SGLang 0.5.23 parser and smg 1.13.0's parser,
and the values they read are the values the codec wrote."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_flags import REDACTED, from_argv, parse_script
from smg.launch_router import parse_router_args

REPO = Path(__file__).resolve().parents[3]
PARSER_PYTHON = REPO / ".cache" / "sglang-parser-venv" / "bin" / "python"
SECRET_PLACEHOLDER = "${SGLANG_API_KEY}"


def _flags(argv: list[str]) -> list[str]:
    first = next(i for i, tok in enumerate(argv) if tok.startswith("--"))
    return argv[first:]


def _scripts(rendered: Path, role: str) -> list[Path]:
    found = sorted(rendered.rglob(f"serve_dsv4_{role}.sh"))
    assert found, f"no serve_dsv4_{role}.sh rendered under {rendered}"
    return found


@pytest.fixture(scope="session")
def sglang_python() -> Path:
    if not PARSER_PYTHON.exists():
        pytest.fail(f"{PARSER_PYTHON} is missing; fix: run `make parser-venv` (make test does it)")
    return PARSER_PYTHON


def test_engine_scripts_parse_with_sglang(rendered: tuple[str, Path], sglang_python: Path) -> None:
    scripts = [(role, path) for role in ("prefill", "decode") for path in _scripts(rendered[1], role)]
    argvs = [_flags(parse_script(path.read_text())) for _, path in scripts]
    run = subprocess.run(
        [str(sglang_python), str(Path(__file__).with_name("sglang_parse.py"))],
        input=json.dumps(argvs),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    for (role, path), argv, result in zip(scripts, argvs, json.loads(run.stdout), strict=True):
        assert result["ok"], f"{path}: {result['error']}"
        parsed = result["args"]
        for key, value in from_argv(role, argv).items():
            expected = SECRET_PLACEHOLDER if value == REDACTED else value
            assert parsed[key] == expected, f"{path}: {key} rendered {expected!r}, SGLang read {parsed[key]!r}"
        assert parsed["disaggregation_mode"] == role


def test_router_scripts_parse_with_smg(rendered: tuple[str, Path]) -> None:
    for path in _scripts(rendered[1], "router"):
        argv = parse_script(path.read_text())
        launch = argv.index("launch")
        args = parse_router_args(argv[launch + 1 :])
        ours = from_argv("router", argv)
        assert args.pd_disaggregation
        for key in (
            "max_concurrent_requests",
            "queue_size",
            "queue_timeout_secs",
            "request_timeout_secs",
            "max_payload_size",
            "port",
        ):
            if key in ours:
                assert getattr(args, key) == ours[key], f"{path}: {key}"
        assert args.prefill_urls and args.decode_urls
