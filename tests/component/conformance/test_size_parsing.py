"""Declared sizes are read as SGLang 0.5.23 reads them: `human_readable_int` (srt/utils/common.py), executed in
the parser venv, gives the same value or the same refusal text as `parse_size` for every input below."""

from __future__ import annotations

import json
import subprocess

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_schema import parse_size
from pool_grid import PARSER_PYTHON, REPO

INPUTS = ("524288", "128k", "1.5k", "2M", "1G", "1T", "128Ki", "4Mi", "1Gi", "1Ti", "1.5Ki", "128K", "12x", " 64k ")

SGLANG_SIDE = """
import json, sys
sys.path.insert(0, sys.argv[2])
import sglang_cpu  # the validation role's CPU bootstrap for SGLang's modules
sglang_cpu.install()
from sglang.srt.utils.common import human_readable_int
out = {}
for text in json.loads(sys.argv[1]):
    try:
        out[text] = {"value": human_readable_int(text)}
    except Exception as error:  # the refusal argparse would print
        out[text] = {"error": str(error)}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def sglang_reads() -> dict[str, dict[str, object]]:
    if not PARSER_PYTHON.exists():
        pytest.fail(f"{PARSER_PYTHON} is missing; fix: run `make parser-venv` (make test does it)")
    run = subprocess.run(
        [
            str(PARSER_PYTHON),
            "-c",
            SGLANG_SIDE,
            json.dumps(INPUTS),
            str(REPO / "collections/ansible_collections/sglang/dsv4/roles/sglang_validate/files"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return dict(json.loads(run.stdout.splitlines()[-1]))


@pytest.mark.parametrize("text", INPUTS)
def test_size_reads_as_sglang_reads_it(sglang_reads: dict[str, dict[str, object]], text: str) -> None:
    try:
        ours: dict[str, object] = {"value": parse_size(text)}
    except ValueError as error:
        ours = {"error": str(error)}
    assert ours == sglang_reads[text]
