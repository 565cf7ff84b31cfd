"""The command line's manners, the same on every command (docs/cli.md): --version, --json (one document of schema
sglang-envelope/1 on stdout), the exit codes 0/1/2, global options before or after the subcommand, size suffixes on
every token option, help text on every option, an --output-tokens the call cannot hold refused, a closed pipe ended
quietly."""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import sglang_envelope_cli.commands as cli
import yaml
from sglang_envelope_cli.output import SCHEMA
from shipped import shipped_inventory

REPO = Path(__file__).resolve().parents[2]
GALAXY = REPO / "collections" / "ansible_collections" / "sglang" / "dsv4" / "galaxy.yml"
PROD = "inventories/production"


@pytest.fixture
def production(monkeypatch: pytest.MonkeyPatch) -> None:
    """--inventory PROD served from the shipped production inventory, without the time model (fast)."""
    prod = shipped_inventory("production")
    monkeypatch.setattr(cli, "load_inventory", lambda inventory: copy.deepcopy(prod))
    monkeypatch.setattr(cli.perf, "default_steps", lambda: None)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_one_version_across_pyproject_galaxy_and_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    galaxy = yaml.safe_load(GALAXY.read_text())
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"sglang-envelope {galaxy['version']}\n"
    assert pyproject["version"] == galaxy["version"]


def test_galaxy_metadata_has_no_placeholder() -> None:
    """No placeholder, and no address of the project the README does not give (a URL field is optional)."""
    galaxy = yaml.safe_load(GALAXY.read_text())
    assert not any("example" in str(v) or "invalid" in str(v) for v in galaxy.values())
    readme = (REPO / "README.md").read_text()
    for field in ("repository", "homepage", "documentation", "issues"):
        assert field not in galaxy or galaxy[field] in readme, (field, galaxy[field])


@pytest.mark.parametrize(
    ("argv", "code", "keys"),
    [
        (["capacity", "-i", PROD, "--out", "{tmp}"], 0, {"fleet", "engines", "files", "risks"}),
        (["plan", "-i", PROD, "--want", "10x4k"], 0, {"plans", "risks"}),
        (["plan", "-i", PROD, "--want", "100x200k"], 1, {"plans", "risks"}),
        (["check-request", "-i", PROD, "--input-tokens", "4k", "--max-new-tokens", "1k"], 0, {"request", "verdict"}),
        (["check-request", "-i", PROD, "--input-tokens", "600k", "--max-new-tokens", "1k"], 1, {"request", "verdict"}),
        (["monitoring", "-i", PROD, "--out", "{tmp}"], 0, {"files"}),
        (["bench", "-i", PROD], 2, set()),
        (["plan", "-i", PROD, "--want", "10x4k", "--output-tokens", "4k"], 2, set()),
    ],
    ids=[
        "capacity",
        "plan-fits",
        "plan-does-not-fit",
        "request-admitted",
        "request-refused",
        "monitoring",
        "bench-refused",
        "output-longer-than-call",
    ],
)
def test_json_document_and_exit_code_of_every_command(
    argv: list[str],
    code: int,
    keys: set[str],
    production: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--json, before or after the subcommand: the same one document on stdout, with the exit code it ends with."""
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    rc, out, err = run(capsys, "--json", *argv)
    doc = json.loads(out)
    assert rc == code == doc["exit_code"]
    assert (doc["schema"], doc["command"]) == (SCHEMA, argv[0])
    assert keys <= set(doc), sorted(doc)
    assert (doc["error"] is None) == (code != 2)
    if code == 2:
        assert err == f"error: {doc['error']}\n"
    assert run(capsys, *argv, "--json")[:2] == (rc, out)


def test_json_of_capacity_carries_the_text_s_figures(
    production: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = run(capsys, "capacity", "-i", PROD, "--out", str(tmp_path), "--json")
    doc = json.loads(out)
    decode = next(e for e in doc["engines"] if e["role"] == "decode")
    assert (decode["host"], decode["limits"]["max_total_num_tokens"], decode["limits"]["context_len"]) == (
        "gpu-node-01",
        11_159_040,
        524_288,
    )
    assert str(tmp_path / "capacity.md") in doc["files"]
    fleet = doc["fleet"]
    assert (fleet["parallel_calls"], fleet["parallel_calls_full_context"], fleet["decode_pool_tokens"]) == (
        64,
        21,
        11_159_040,
    )


def test_plan_exit_code_follows_the_fit_and_json_says_which(
    production: None, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, _ = run(capsys, "plan", "-i", PROD, "--want", "10x4k", "--want", "100x200k", "--json")
    doc = json.loads(out)
    assert rc == 1
    assert [(p["shape"]["calls"], p["shape"]["tokens"], p["fits"]) for p in doc["plans"]] == [
        (10, 4000, True),
        (100, 200_000, False),
    ]


def test_no_time_after_the_subcommand_is_the_same_as_before(
    production: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[bool] = []
    monkeypatch.setattr(cli, "plan_command", lambda *args: seen.append(cli._TIME["on"]) or 0)
    assert run(capsys, "--no-time", "plan", "-i", PROD, "--want", "1x1k")[0] == 0
    assert run(capsys, "plan", "-i", PROD, "--want", "1x1k", "--no-time")[0] == 0
    assert run(capsys, "plan", "-i", PROD, "--want", "1x1k")[0] == 0
    assert seen == [False, False, True]


@pytest.mark.parametrize(
    ("option", "text", "value"),
    [("--input-tokens", "600k", 600_000), ("--input-tokens", "512Ki", 524_288), ("--max-new-tokens", "8k", 8000)],
)
def test_token_options_take_size_suffixes(
    option: str, text: str, value: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[tuple[int, int]] = []
    monkeypatch.setattr(cli, "check_request_command", lambda inv, i, m, chat: seen.append((i, m)) or 0)
    argv = {"--input-tokens": "1", "--max-new-tokens": "1", option: text}
    assert run(capsys, "check-request", "-i", PROD, *[x for kv in argv.items() for x in kv])[0] == 0
    assert seen[0][0 if option == "--input-tokens" else 1] == value


def test_output_tokens_take_size_suffixes_and_the_call_must_hold_them(
    production: None, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, err = run(capsys, "plan", "-i", PROD, "--want", "10x4k", "--output-tokens", "5k")
    assert (rc, out) == (2, "")
    assert err == (
        "error: --output-tokens 5000 is not below the call's 4000 tokens (--want 10x4k): the output tokens are part "
        "of the call; fix: a smaller --output-tokens or a longer call\n"
    )
    assert run(capsys, "plan", "-i", PROD, "--want", "10x4k", "--output-tokens", "1Ki")[0] == 0


def _actions(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.Action]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += [(f"{name} {opt}", a) for opt, a in _actions(sub)]
        elif action.option_strings:
            found.append((action.option_strings[0], action))
    return found


def test_every_option_has_help_text() -> None:
    missing = [name for name, action in _actions(cli.build_parser()) if not action.help]
    assert missing == []


def test_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    """`sglang-envelope ... | head -1`: no BrokenPipeError traceback, the exit code a shell gives a closed pipe.

    The reader is gone before the first line: closing it after one line races the whole answer into the pipe's
    buffer, and a finished write never sees the closed pipe."""
    cmd = [sys.executable, "-m", "sglang_envelope_cli", "capacity", "-i", str(REPO / PROD), "--no-time"]
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            [*cmd, "--out", str(tmp_path)], stdout=write_end, stderr=subprocess.PIPE, cwd=REPO, check=False
        )
    finally:
        os.close(write_end)
    assert (proc.returncode, proc.stderr) == (141, b"")


def test_exit_codes_are_documented() -> None:
    doc = (REPO / "docs" / "cli.md").read_text()
    for line in ("| 0 |", "| 1 |", "| 2 |", "| 130 |", "| 141 |", "| 143 |", SCHEMA):
        assert line in doc
