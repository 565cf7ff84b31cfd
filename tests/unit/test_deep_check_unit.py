"""The deep check's own logic, without SGLang or smg: the lines it renders per role, the cache key, the cache,
the request each checker gets and how its answer becomes a validation problem naming the declared variables.

The checkers run as a stand-in interpreter: a tiny /bin/sh script in a venv-shaped tmp folder that saves the
request it reads and prints an answer the test wrote, so the result handling runs on a real process pipe."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_deep
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_deep import (
    FILES_DIR,
    Line,
    _installed,
    cache_key,
    command_lines,
    deep_check,
    engine_line,
    problem,
    resolve_pythons,
    router_line,
    run_checkers,
)

MODELS = Path(__file__).resolve().parents[2] / "models"
CTL = Path("/ctl/models")
GROUPS = {"sglang_prefill": ["gpu-1"], "sglang_decode": ["gpu-1"], "sglang_router": ["gpu-1"]}

# The refusal of a decode line as the real parser venv answered it (an entry of .cache/deep-check/ written by
# tests/component/contract/test_deep_check.py, case kv-mxfp8-decode).
SGLANG_REFUSAL = {
    "culprits": ["--kv-cache-dtype"],
    "error": "AssertionError: mxfp8 is not supported for DeepseekV4ForCausalLM",
    "ok": False,
    "resolved": {},
}
# An accepted router line as smg_startup_check.py answers it (.cache/deep-check/).
SMG_OK = {"culprits": [], "error": "", "ok": True}


def fleet() -> dict[str, Any]:
    """One host's variables: a small PD fleet shaped like group_vars/all/envelope.yml."""
    return {
        "sglang_model": {"name": "m1", "path": "/models/M1", "served_name": "m1-served"},
        "sglang_engine_common": {"tp_size": 2, "kv_cache_dtype": "fp8_e4m3", "bf16_index_k": True},
        "sglang_prefill": {
            "gpu_ids": [2, 3],
            "port": 30000,
            "disaggregation_bootstrap_port": 8998,
            "mem_fraction_static": 0.78,
        },
        "sglang_decode": {"gpu_ids": [4, 5], "port": 30001, "base_gpu_id": 4},
        "sglang_router": {"port": 8000, "queue_size": 16},
        "sglang_advertise_host": "10.0.0.5",
    }


PREFILL_ARGV = [
    "--model-path", "/ctl/models/m1", "--served-model-name", "m1-served", "--port", "30000",
    "--mem-fraction-static", "0.78", "--kv-cache-dtype", "fp8_e4m3", "--tp-size", "2", "--base-gpu-id", "2",
    "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", "8998",
]  # fmt: skip
DECODE_ARGV = [
    "--model-path", "/ctl/models/m1", "--served-model-name", "m1-served", "--port", "30001",
    "--kv-cache-dtype", "fp8_e4m3", "--tp-size", "2", "--base-gpu-id", "4", "--disaggregation-mode", "decode",
]  # fmt: skip
ROUTER_ARGV = [
    "--pd-disaggregation", "--prefill", "http://10.0.0.5:30000", "8998", "--decode", "http://10.0.0.5:30001",
    "--port", "8000", "--queue-size", "16", "--disable-tokenizer-autoload",
]  # fmt: skip
PREFILL_SOURCES = {
    "--model-path": ("sglang_model.path", "/models/M1"),
    "--served-model-name": ("sglang_model.served_name", "m1-served"),
    "--port": ("sglang_prefill.port", 30000),
    "--mem-fraction-static": ("sglang_prefill.mem_fraction_static", 0.78),
    "--kv-cache-dtype": ("sglang_engine_common.kv_cache_dtype", "fp8_e4m3"),
    "--tp-size": ("sglang_engine_common.tp_size", 2),
    "--base-gpu-id": ("sglang_prefill.gpu_ids", [2, 3]),
    "--disaggregation-mode": ("the inventory group sglang_prefill", "prefill"),
    "--disaggregation-bootstrap-port": ("sglang_prefill.disaggregation_bootstrap_port", 8998),
    "SGLANG_DSV4_BF16_INDEX_K": ("sglang_engine_common.bf16_index_k", True),
}
ROUTER_SOURCES = {
    "--port": ("sglang_router.port", 8000),
    "--queue-size": ("sglang_router.queue_size", 16),
    "--prefill": ("the inventory group sglang_prefill (worker URLs and bootstrap ports)", None),
    "--decode": ("the inventory group sglang_decode (worker URLs)", None),
    "--disable-tokenizer-autoload": ("sglang_router_extra_args", ["--disable-tokenizer-autoload"]),
}


# --- the lines ------------------------------------------------------------------------------------------------


def test_prefill_line_is_the_rendered_flags_with_the_controller_model_dir() -> None:
    """Argv in schema order, --model-path on models/<name>, env from the codec, every flag's declared source."""
    line = engine_line("gpu-1", "prefill", fleet(), CTL)
    assert (line.host, line.role, line.tool) == ("gpu-1", "prefill", "sglang")
    assert line.argv == PREFILL_ARGV
    assert line.environ == {"SGLANG_DSV4_BF16_INDEX_K": "1"}
    assert line.sources == PREFILL_SOURCES


def test_decode_line_names_a_declared_base_gpu_id_itself() -> None:
    """A base_gpu_id declared in the role's dict is shown as that value, not as gpu_ids."""
    line = engine_line("gpu-1", "decode", fleet(), CTL)
    assert (line.tool, line.argv) == ("sglang", DECODE_ARGV)
    assert line.sources["--base-gpu-id"] == ("sglang_decode.base_gpu_id", 4)
    assert line.sources["--port"] == ("sglang_decode.port", 30001)
    assert line.sources["--disaggregation-mode"] == ("the inventory group sglang_decode", "decode")
    assert "--disaggregation-bootstrap-port" not in line.sources


def test_engine_line_with_api_key_shared_base_gpu_id_and_extra_env() -> None:
    """The API key renders as its env reference and is shown as <set>; a shared base_gpu_id without gpu_ids is
    shown as itself; sglang_engine_extra_env values are strings, override the codec's, and are their own source."""
    hostvars = {
        "sglang_model": {"name": "m1", "path": "/models/M1", "served_name": "m1-served"},
        "sglang_engine_common": {"tp_size": 2, "base_gpu_id": 6, "bf16_index_k": True},
        "sglang_api_key": "s3cret",
        "sglang_engine_extra_env": {"NCCL_DEBUG": "INFO", "SGLANG_DSV4_BF16_INDEX_K": 0, 7: 1.5},
    }
    line = engine_line("h", "decode", hostvars, Path("/c"))
    assert line.argv == [
        "--model-path", "/c/m1", "--served-model-name", "m1-served", "--api-key", "${SGLANG_API_KEY}",
        "--tp-size", "2", "--base-gpu-id", "6", "--disaggregation-mode", "decode",
    ]  # fmt: skip
    assert line.environ == {"SGLANG_DSV4_BF16_INDEX_K": "0", "NCCL_DEBUG": "INFO", "7": "1.5"}
    assert line.sources == {
        "--model-path": ("sglang_model.path", "/models/M1"),
        "--served-model-name": ("sglang_model.served_name", "m1-served"),
        "--api-key": ("sglang_api_key", "<set>"),
        "--tp-size": ("sglang_engine_common.tp_size", 2),
        "--base-gpu-id": ("sglang_engine_common.base_gpu_id", 6),
        "--disaggregation-mode": ("the inventory group sglang_decode", "decode"),
        "SGLANG_DSV4_BF16_INDEX_K": ("sglang_engine_extra_env.SGLANG_DSV4_BF16_INDEX_K", "0"),
        "NCCL_DEBUG": ("sglang_engine_extra_env.NCCL_DEBUG", "INFO"),
        "7": ("sglang_engine_extra_env.7", "1.5"),
    }


def test_engine_line_without_model_dict_or_key() -> None:
    """A model_path declared without sglang_model points at models/None; no key, no --api-key, no extra env."""
    line = engine_line("h", "prefill", {"sglang_engine_common": {"model_path": "/x"}, "sglang_api_key": ""}, CTL)
    assert line.argv == ["--model-path", "/ctl/models/None", "--disaggregation-mode", "prefill"]
    assert line.environ == {}
    assert line.sources == {
        "--model-path": ("sglang_engine_common.model_path", "/x"),
        "--disaggregation-mode": ("the inventory group sglang_prefill", "prefill"),
    }


def test_a_key_declared_in_a_dict_is_never_shown() -> None:
    """An api_key declared in an engine's or the router's dict renders as the env reference and shows <set>."""
    hostvars = {"sglang_decode": {"api_key": "hunter2", "port": 1}, "sglang_router": {"api_key": "hunter2"}}
    engine = engine_line("h", "decode", hostvars, CTL)
    router = router_line("h", hostvars, {}, {})
    assert engine.argv == ["--port", "1", "--api-key", "${SGLANG_API_KEY}", "--disaggregation-mode", "decode"]
    assert engine.sources["--api-key"] == ("sglang_decode.api_key", "<set>")
    assert router.argv == ["--pd-disaggregation", "--api-key", "${SGLANG_API_KEY}", "--disable-tokenizer-autoload"]
    assert router.sources["--api-key"][1] == "<set>"
    assert "hunter2" not in repr((engine, router))


def test_router_line_is_pd_mode_workers_codec_then_extra_args() -> None:
    """--pd-disaggregation, the worker lists from the groups, the codec's flags, the default extra args."""
    hostvars = fleet()
    line = router_line("gpu-1", hostvars, {"gpu-1": hostvars}, GROUPS)
    assert (line.host, line.role, line.tool) == ("gpu-1", "router", "smg")
    assert line.argv == ROUTER_ARGV
    assert line.environ == {}
    assert line.sources == ROUTER_SOURCES


def test_router_line_with_api_key_and_own_extra_args() -> None:
    """The key is shown as <set> under sglang_api_key; declared extra args are strings; an extra flag the codec
    already renders keeps the codec's source; no decode group means no --decode worker."""
    hostvars = {
        **fleet(),
        "sglang_api_key": "s3cret",
        "sglang_router_extra_args": ["--log-level", "debug", "--port", 9],
    }
    line = router_line("r", hostvars, {"gpu-1": hostvars}, {"sglang_prefill": ["gpu-1"]})
    assert line.argv == [
        "--pd-disaggregation", "--prefill", "http://10.0.0.5:30000", "8998", "--port", "8000",
        "--api-key", "${SGLANG_API_KEY}", "--queue-size", "16", "--log-level", "debug", "--port", "9",
    ]  # fmt: skip
    extra = ["--log-level", "debug", "--port", "9"]
    assert line.sources == {
        "--port": ("sglang_router.port", 8000),
        "--api-key": ("sglang_api_key", "<set>"),
        "--queue-size": ("sglang_router.queue_size", 16),
        "--prefill": ("the inventory group sglang_prefill (worker URLs and bootstrap ports)", None),
        "--decode": ("the inventory group sglang_decode (worker URLs)", None),
        "--log-level": ("sglang_router_extra_args", extra),
    }


def test_fleet_lines_in_role_order_and_skips_naming_host_role_and_reason() -> None:
    """Prefill, decode, then router lines, hosts in group order; an envelope that cannot be built is skipped
    with `host role: reason`, the others still render."""
    good = fleet()
    bad = {**good, "sglang_prefill": {"tp_size": "x"}}
    all_hostvars = {"gpu-1": good, "bad": bad}
    groups = {
        "sglang_prefill": ["bad", "ghost", "gpu-1"],
        "sglang_decode": ["gpu-1"],
        "sglang_router": ["gpu-1"],
        "sglang_engine": ["bad"],
    }
    lines, skipped = command_lines(all_hostvars, groups, str(CTL))
    assert [(line.host, line.role) for line in lines] == [("gpu-1", "prefill"), ("gpu-1", "decode")]
    assert lines[0].argv == PREFILL_ARGV and lines[1].argv == DECODE_ARGV
    assert skipped == [
        "bad prefill: sglang_prefill.tp_size='x' is not a valid int; fix: declare a int value (it renders as "
        "--tp-size)",
        "ghost prefill: 'ghost'",
        "gpu-1 router: sglang_prefill.tp_size='x' is not a valid int; fix: declare a int value (it renders as "
        "--tp-size)",
    ]


def test_fleet_lines_of_a_whole_fleet() -> None:
    """Each server of each group gets exactly its line."""
    lines, skipped = command_lines({"gpu-1": fleet()}, GROUPS, CTL)
    assert skipped == []
    assert [(line.role, line.argv) for line in lines] == [
        ("prefill", PREFILL_ARGV),
        ("decode", DECODE_ARGV),
        ("router", ROUTER_ARGV),
    ]


def test_fleet_lines_of_a_fleet_with_only_a_router() -> None:
    """Missing groups have no servers: one router line without workers."""
    lines, skipped = command_lines({"gpu-1": fleet()}, {"sglang_router": ["gpu-1"]}, CTL)
    assert skipped == []
    assert [(line.role, line.argv) for line in lines] == [
        ("router", ["--pd-disaggregation", "--port", "8000", "--queue-size", "16", "--disable-tokenizer-autoload"])
    ]


# --- the cache key ---------------------------------------------------------------------------------------------


def venv(root: Path, *dists: str) -> Path:
    """A venv-shaped folder with these installed distribution directories; its bin/python (not created)."""
    site = root / "lib" / "python3.12" / "site-packages"
    site.mkdir(parents=True)
    for dist in dists:
        (site / dist).mkdir()
    (site / "other_pkg-1.0.dist-info").mkdir()
    (root / "bin").mkdir()
    return root / "bin" / "python"


def checkers(root: Path) -> Path:
    """A files dir with stand-in checker sources (their bytes go into the key)."""
    root.mkdir()
    (root / "sglang_startup_check.py").write_text("# sglang checker\n")
    (root / "sglang_cpu.py").write_text("# cpu shim\n")
    (root / "smg_startup_check.py").write_text("# smg checker\n")
    return root


def test_installed_reads_the_venv_not_the_interpreter(tmp_path: Path) -> None:
    """The dist-info / egg-info directories of one distribution in the venv of `python`, sorted."""
    python = venv(tmp_path / "v", "smg-1.13.0.dist-info", "sglang-0.5.23.dist-info", "smg-1.12.0.egg-info")
    (tmp_path / "v" / "lib" / "python3.12" / "site-packages" / "smg-extra").mkdir()
    assert _installed(str(python), "smg") == ["smg-1.12.0.egg-info", "smg-1.13.0.dist-info"]
    assert _installed(str(python), "sglang") == ["sglang-0.5.23.dist-info"]
    assert _installed(str(tmp_path / "none" / "bin" / "python"), "smg") == []


SMG_LINE = Line("r", "router", ["--port", "8000"], {}, {"--port": ("sglang_router.port", 8000)})
SGLANG_LINE = Line("h", "decode", ["--tp-size", "2"], {"B": "2", "A": "1"})


@pytest.fixture
def keyed(tmp_path: Path) -> tuple[str, Path]:
    python = venv(tmp_path / "v", "smg-1.13.0.dist-info", "sglang-0.5.23.dist-info")
    return str(python), checkers(tmp_path / "files")


def recipe(parts: list[bytes], tool: str, argv: list[str], environ: list[list[str]], installed: list[str]) -> str:
    """The key as documented: sha256 over each source's sha256, then the JSON of tool, argv, sorted env items
    and the installed distribution directories."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(hashlib.sha256(part).digest())
    digest.update(json.dumps([tool, argv, environ, installed]).encode())
    return digest.hexdigest()


def test_cache_key_values(keyed: tuple[str, Path]) -> None:
    """A router line: the smg checker only; an engine line: the SGLang checker, its CPU shim, the model config."""
    python, files = keyed
    assert cache_key(SMG_LINE, python, files, b"cfg") == recipe(
        [b"# smg checker\n"], "smg", ["--port", "8000"], [], ["smg-1.13.0.dist-info"]
    )
    assert cache_key(SGLANG_LINE, python, files, b"cfg") == recipe(
        [b"# sglang checker\n", b"# cpu shim\n", b"cfg"],
        "sglang",
        ["--tp-size", "2"],
        [["A", "1"], ["B", "2"]],
        ["sglang-0.5.23.dist-info"],
    )


@pytest.mark.parametrize(
    ("change", "smg_changes", "sglang_changes"),
    [
        ("smg checker", True, False),
        ("sglang checker", False, True),
        ("cpu shim", False, True),
        ("model config", False, True),
        ("installed", True, True),
    ],
)
def test_cache_key_follows_only_what_the_tool_reads(
    keyed: tuple[str, Path], change: str, smg_changes: bool, sglang_changes: bool
) -> None:
    """A router line's key ignores the SGLang checker, its CPU shim and the model config."""
    python, files = keyed
    before = (cache_key(SMG_LINE, python, files, b"{}"), cache_key(SGLANG_LINE, python, files, b"{}"))
    config = b"{}"
    site = Path(python).parents[1] / "lib" / "python3.12" / "site-packages"
    if change == "smg checker":
        (files / "smg_startup_check.py").write_text("# smg checker v2\n")
    elif change == "sglang checker":
        (files / "sglang_startup_check.py").write_text("# sglang checker v2\n")
    elif change == "cpu shim":
        (files / "sglang_cpu.py").write_text("# cpu shim v2\n")
    elif change == "model config":
        config = b'{"a": 1}'
    else:
        (site / "smg-1.13.0.dist-info").rename(site / "smg-1.13.1.dist-info")
        (site / "sglang-0.5.23.dist-info").rename(site / "sglang-0.5.24.dist-info")
    after = (cache_key(SMG_LINE, python, files, config), cache_key(SGLANG_LINE, python, files, config))
    assert (before[0] != after[0], before[1] != after[1]) == (smg_changes, sglang_changes)


@pytest.mark.parametrize(
    "other",
    [
        Line("h", "decode", ["--tp-size", "4"], {"B": "2", "A": "1"}),
        Line("h", "decode", ["--tp-size", "2"], {"B": "2", "A": "0"}),
        Line("h", "decode", ["--tp-size", "2"], {"B": "2"}),
        Line("h", "router", ["--tp-size", "2"], {"B": "2", "A": "1"}),
    ],
    ids=["argv", "env-value", "env-key", "tool"],
)
def test_cache_key_follows_the_line(keyed: tuple[str, Path], other: Line) -> None:
    """Another argv, env value, env key or tool is another key."""
    python, files = keyed
    assert cache_key(other, python, files, b"{}") != cache_key(SGLANG_LINE, python, files, b"{}")


def test_cache_key_ignores_host_sources_and_env_order(keyed: tuple[str, Path]) -> None:
    """Two servers with the same line share one entry."""
    python, files = keyed
    same = Line("other-host", "prefill", ["--tp-size", "2"], {"A": "1", "B": "2"}, {"--tp-size": ("x", 2)})
    assert cache_key(same, python, files, b"{}") == cache_key(SGLANG_LINE, python, files, b"{}")


# --- running the checkers ------------------------------------------------------------------------------------

SCRIPT = """#!/bin/sh
if [ "$1" = "-c" ]; then printf '%s\\n' "$2" > "$0.probe"; echo probe-says-hi; exit {probe}; fi
cat > "$1.request"
cat "$1.answer"
if [ -f "$1.stderr" ]; then cat "$1.stderr" >&2; fi
exit {status}
"""


def interpreter(python: Path, status: int = 0, probe: int = 0) -> str:
    """Make `python` the stand-in: `-c CODE` (the smg import probe) exits `probe`; `CHECKER` saves stdin to
    CHECKER.request, prints CHECKER.answer (and CHECKER.stderr on stderr) and exits `status`."""
    python.write_text(SCRIPT.format(probe=probe, status=status))
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return str(python)


class Rig:
    """Two stand-in venvs and a files dir of stand-in checkers."""

    def __init__(self, root: Path, status: int = 0) -> None:
        self.sglang = interpreter(venv(root / "parser", "sglang-0.5.23.dist-info"), status)
        self.smg = interpreter(venv(root / "ctl", "smg-1.13.0.dist-info"), status)
        self.files = checkers(root / "files")

    def answer(self, checker: str, body: Any, stderr: str | None = None) -> None:
        text = body if isinstance(body, str) else json.dumps(body)
        (self.files / checker).with_name(checker + ".answer").write_text(text)
        if stderr is not None:
            (self.files / checker).with_name(checker + ".stderr").write_text(stderr)

    def request(self, checker: str) -> Any:
        path = self.files / (checker + ".request")
        return json.loads(path.read_text()) if path.exists() else None


@pytest.fixture
def rig(tmp_path: Path) -> Rig:
    return Rig(tmp_path / "rig")


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """time.monotonic reads 100.0 at the start and 112.345 at the end of a run."""
    ticks = iter([100.0, 112.345])
    real = time.monotonic
    monkeypatch.setattr(time, "monotonic", lambda: next(ticks, None) or real())
    yield


SGL = "sglang_startup_check.py"
SMG = "smg_startup_check.py"


def test_each_tool_gets_its_cases_and_the_answers_come_back_in_line_order(rig: Rig, clock: None) -> None:
    """One request per tool with id, argv, environ, ablate; answers land by id, without the id; stats."""
    lines = [SGLANG_LINE, SMG_LINE, Line("h", "prefill", ["--port", "1"])]
    rig.answer(SGL, [{"id": "2", **SMG_OK}, {"id": "0", **SGLANG_REFUSAL}])
    rig.answer(SMG, [{"id": "1", **SMG_OK}])
    results, stats = run_checkers(lines, rig.sglang, rig.smg, rig.files, None, b"", ablate=False)
    assert results == [SGLANG_REFUSAL, SMG_OK, SMG_OK]
    assert stats == {"checked": 3, "cached": 0, "seconds": 12.3}
    assert rig.request(SGL) == {
        "cases": [
            {"id": "0", "argv": ["--tp-size", "2"], "environ": {"B": "2", "A": "1"}, "ablate": False},
            {"id": "2", "argv": ["--port", "1"], "environ": {}, "ablate": False},
        ]
    }
    assert rig.request(SMG) == {"cases": [{"id": "1", "argv": ["--port", "8000"], "environ": {}, "ablate": False}]}


def test_ablate_is_asked_by_default(rig: Rig) -> None:
    """Each case asks the checker to ablate (find the culprits of a refusal) unless told not to."""
    rig.answer(SMG, [{"id": "0", **SMG_OK}])
    results, stats = run_checkers([SMG_LINE], None, rig.smg, rig.files)
    assert results == [SMG_OK]
    assert (stats["checked"], stats["cached"]) == (1, 0)
    assert rig.request(SMG)["cases"][0]["ablate"] is True


@pytest.mark.parametrize("tool", ["sglang", "smg"])
def test_a_tool_without_python_is_not_run(rig: Rig, tool: str) -> None:
    """Its lines get {} and are not counted; the other tool's lines still run."""
    rig.answer(SGL, [{"id": "0", **SGLANG_REFUSAL}])
    rig.answer(SMG, [{"id": "1", **SMG_OK}])
    sglang = None if tool == "sglang" else rig.sglang
    smg = "" if tool == "smg" else rig.smg
    results, stats = run_checkers([SGLANG_LINE, SMG_LINE], sglang, smg, rig.files)
    expected = [{}, SMG_OK] if tool == "sglang" else [SGLANG_REFUSAL, {}]
    assert results == expected
    assert (stats["checked"], stats["cached"]) == (1, 0)
    assert (rig.request(SGL) is None, rig.request(SMG) is None) == (tool == "sglang", tool == "smg")


def test_nothing_to_run_starts_nothing(rig: Rig, clock: None) -> None:
    """No lines: no checker process, empty results."""
    assert run_checkers([], rig.sglang, rig.smg, rig.files) == ([], {"checked": 0, "cached": 0, "seconds": 12.3})
    assert rig.request(SGL) is None and rig.request(SMG) is None


def test_answers_are_cached_aside_then_renamed(rig: Rig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each answer is written to .KEY.PID.json in a cache dir made on demand, then renamed to KEY.json."""
    cache = tmp_path / "a" / "cache"
    lines = [SGLANG_LINE, Line("h", "prefill", ["--port", "1"]), SMG_LINE]
    keys = [cache_key(line, rig.sglang if line.tool == "sglang" else rig.smg, rig.files, b"cfg") for line in lines]
    renames: list[tuple[str, str]] = []
    real_replace = os.replace

    def replace(src: Path, dst: Path) -> None:
        renames.append((str(src), str(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    # The keys in the order the checkers print them (id, ok, error, culprits, resolved); the file is sorted.
    refusal = {"id": "0", "ok": False, "error": SGLANG_REFUSAL["error"], "culprits": ["--kv-cache-dtype"]}
    rig.answer(SGL, [{**refusal, "resolved": {}}, {"id": "1", **SMG_OK}])
    rig.answer(SMG, [{"id": "2", **SMG_OK}])
    results, stats = run_checkers(lines, rig.sglang, rig.smg, rig.files, cache, b"cfg")
    assert results == [SGLANG_REFUSAL, SMG_OK, SMG_OK]
    assert (stats["checked"], stats["cached"]) == (3, 0)
    pid = os.getpid()
    assert renames == [
        (f"{cache}/.{keys[2]}.{pid}.json", f"{cache}/{keys[2]}.json"),
        (f"{cache}/.{keys[0]}.{pid}.json", f"{cache}/{keys[0]}.json"),
        (f"{cache}/.{keys[1]}.{pid}.json", f"{cache}/{keys[1]}.json"),
    ]
    assert sorted(os.listdir(cache)) == sorted(f"{k}.json" for k in keys)
    assert (cache / f"{keys[0]}.json").read_text() == (
        '{"culprits": ["--kv-cache-dtype"], "error": "AssertionError: mxfp8 is not supported for '
        'DeepseekV4ForCausalLM", "ok": false, "resolved": {}}'
    )


def test_a_cached_line_is_not_run_again(rig: Rig, tmp_path: Path, clock: None) -> None:
    """A hit is read back marked cached; only the missing line goes to its checker."""
    cache = tmp_path / "cache"
    cache.mkdir()
    key = cache_key(SGLANG_LINE, rig.sglang, rig.files, b"cfg")
    (cache / f"{key}.json").write_text(json.dumps(SGLANG_REFUSAL))
    rig.answer(SMG, [{"id": "1", **SMG_OK}])
    results, stats = run_checkers([SGLANG_LINE, SMG_LINE], rig.sglang, rig.smg, rig.files, cache, b"cfg")
    assert results == [{**SGLANG_REFUSAL, "cached": True}, SMG_OK]
    assert stats == {"checked": 2, "cached": 1, "seconds": 12.3}
    assert rig.request(SGL) is None
    assert rig.request(SMG)["cases"] == [{"id": "1", "argv": ["--port", "8000"], "environ": {}, "ablate": True}]


@pytest.mark.parametrize("text", ['{"ok": fal', "[]", ""], ids=["truncated", "not-an-object", "empty"])
def test_an_unreadable_cache_entry_is_checked_again(rig: Rig, tmp_path: Path, text: str) -> None:
    """A cache entry that is not a result (cut short, or another shape) is a miss: the line runs and is rewritten."""
    cache = tmp_path / "cache"
    cache.mkdir()
    entry = cache / f"{cache_key(SGLANG_LINE, rig.sglang, rig.files, b'cfg')}.json"
    entry.write_text(text)
    rig.answer(SGL, [{"id": "0", **SGLANG_REFUSAL}])
    results, stats = run_checkers([SGLANG_LINE], rig.sglang, None, rig.files, cache, b"cfg")
    assert results == [SGLANG_REFUSAL]
    assert (stats["checked"], stats["cached"]) == (1, 0)
    assert json.loads(entry.read_text()) == SGLANG_REFUSAL


def test_the_model_config_defaults_to_none(rig: Rig, tmp_path: Path) -> None:
    """Without a model config the key is taken over b''."""
    rig.answer(SGL, [{"id": "0", **SMG_OK}])
    run_checkers([SGLANG_LINE], rig.sglang, None, rig.files, tmp_path / "cache")
    assert os.listdir(tmp_path / "cache") == [f"{cache_key(SGLANG_LINE, rig.sglang, rig.files, b'')}.json"]


def test_a_line_cached_under_another_model_config_runs_again(rig: Rig, tmp_path: Path) -> None:
    """A changed model config misses the old entry and adds a new one."""
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / f"{cache_key(SGLANG_LINE, rig.sglang, rig.files, b'old')}.json").write_text(json.dumps(SMG_OK))
    rig.answer(SGL, [{"id": "0", **SGLANG_REFUSAL}])
    results, stats = run_checkers([SGLANG_LINE], rig.sglang, None, rig.files, cache, b"new")
    assert results == [SGLANG_REFUSAL]
    assert (stats["checked"], stats["cached"]) == (1, 0)
    assert len(os.listdir(cache)) == 2


def test_the_checker_gets_its_request_on_pipes_with_a_900_second_limit(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`PYTHON CHECKER`, text pipes for stdin/stdout/stderr, and communicate(request, timeout=900)."""
    seen: dict[str, Any] = {}

    class Proc:
        returncode = 0

        def __init__(self, argv: list[str], **kwargs: Any) -> None:
            seen["argv"], seen["kwargs"] = argv, kwargs

        def communicate(self, request: str, timeout: float) -> tuple[str, str]:
            seen["request"], seen["timeout"] = request, timeout
            return json.dumps([{"id": "0", **SMG_OK}]), ""

    monkeypatch.setattr(sglang_deep.subprocess, "Popen", Proc)
    assert run_checkers([SMG_LINE], None, rig.smg, rig.files)[0] == [SMG_OK]
    assert seen == {
        "argv": [rig.smg, str(rig.files / SMG)],
        "kwargs": {"stdin": -1, "stdout": -1, "stderr": -1, "text": True},
        "request": '{"cases": [{"id": "0", "argv": ["--port", "8000"], "environ": {}, "ablate": true}]}',
        "timeout": 900,
    }


@pytest.mark.parametrize(
    ("stdout", "stderr", "tail"),
    [
        ("", "Traceback (most recent call last):\n  boom\nImportError: no sglang\n", "ImportError: no sglang"),
        ("not json at all\n", "", "not json at all"),
        ("", "a" * 500 + "b" * 2000 + "\n", "b" * 2000),
    ],
    ids=["stderr", "stdout-when-stderr-is-empty", "last-2000-characters"],
)
def test_a_checker_that_does_not_answer_json_raises_with_its_output(
    tmp_path: Path, stdout: str, stderr: str, tail: str
) -> None:
    """The error names python, checker, exit status and the tail of stderr (else stdout)."""
    rig = Rig(tmp_path / "rig", status=3)
    rig.answer(SMG, stdout, stderr)
    with pytest.raises(RuntimeError) as raised:
        run_checkers([SMG_LINE], None, rig.smg, rig.files)
    message = str(raised.value)
    if tail.startswith("ImportError"):
        tail = "Traceback (most recent call last):\n  boom\nImportError: no sglang"
    assert message == f"{rig.smg} {rig.files / SMG} failed with exit status 3: {tail}"


# --- a result as a problem -----------------------------------------------------------------------------------

PREFILL = Line("gpu-1", "prefill", PREFILL_ARGV, {}, PREFILL_SOURCES)
ROUTER = Line("gpu-1", "router", ROUTER_ARGV, {}, ROUTER_SOURCES)
SG_TAIL = "SGLang 0.5.23's own check accepts it"


@pytest.mark.parametrize("result", [{}, {"ok": True, "culprits": ["--port"], "error": "x"}])
def test_no_refusal_no_problem(result: dict[str, Any]) -> None:
    """No result (tool not run) or an accepted line: no problem."""
    assert problem(PREFILL, result) is None


@pytest.mark.parametrize(
    ("line", "result", "expected"),
    [
        (
            Line("gpu-1", "decode", DECODE_ARGV, {}, {"--kv-cache-dtype": ("sglang_decode.kv_cache_dtype", "mxfp8")}),
            SGLANG_REFUSAL,
            "gpu-1: sglang_decode.kv_cache_dtype='mxfp8': SGLang 0.5.23 refuses the rendered decode engine command "
            "line at startup: AssertionError: mxfp8 is not supported for DeepseekV4ForCausalLM; "
            f"fix: change sglang_decode.kv_cache_dtype so that {SG_TAIL}",
        ),
        (
            PREFILL,
            {"ok": False, "error": "E", "culprits": ["--port", "--base-gpu-id", "SGLANG_DSV4_BF16_INDEX_K"]},
            "gpu-1: sglang_prefill.port=30000 with gpu-1: sglang_prefill.gpu_ids=[2, 3] with "
            "gpu-1: sglang_engine_common.bf16_index_k=True: SGLang 0.5.23 refuses the rendered prefill engine "
            "command line at startup: E; fix: change sglang_prefill.port or sglang_prefill.gpu_ids or "
            f"sglang_engine_common.bf16_index_k so that {SG_TAIL}",
        ),
        (
            PREFILL,
            {"ok": False, "error": "E", "culprits": ["--nope"]},
            "gpu-1: the rendered flag --nope: SGLang 0.5.23 refuses the rendered prefill engine command line at "
            f"startup: E; fix: change the rendered flag --nope so that {SG_TAIL}",
        ),
        (
            PREFILL,
            {"ok": False, "error": "E"},
            "gpu-1: sglang_engine_common / sglang_prefill (the flag behind it is not identified): SGLang 0.5.23 "
            f"refuses the rendered prefill engine command line at startup: E; fix: change the declared envelope "
            f"so that {SG_TAIL}",
        ),
        (
            PREFILL,
            {"ok": False, "culprits": None},
            "gpu-1: sglang_engine_common / sglang_prefill (the flag behind it is not identified): SGLang 0.5.23 "
            f"refuses the rendered prefill engine command line at startup: None; fix: change the declared envelope "
            f"so that {SG_TAIL}",
        ),
        (
            ROUTER,
            {"ok": False, "error": "ValueError: 'port': 0 - Port must be > 0", "culprits": ["--port", "--prefill"]},
            "gpu-1: sglang_router.port=8000 with gpu-1: the inventory group sglang_prefill (worker URLs and "
            "bootstrap ports): smg 1.13.0 refuses the rendered router command line at startup: ValueError: 'port': "
            "0 - Port must be > 0; fix: change sglang_router.port or the inventory group sglang_prefill (worker "
            "URLs and bootstrap ports) so that smg 1.13.0's own check accepts it",
        ),
        (
            ROUTER,
            {"ok": False, "error": "E", "culprits": []},
            "gpu-1: sglang_router (the flag behind it is not identified): smg 1.13.0 refuses the rendered router "
            "command line at startup: E; fix: change the declared envelope so that smg 1.13.0's own check "
            "accepts it",
        ),
    ],
    ids=["one-culprit", "several", "unknown-flag", "no-culprits", "culprits-null", "router", "router-unnamed"],
)
def test_a_refusal_names_host_variables_values_and_fix(line: Line, result: dict[str, Any], expected: str) -> None:
    """Synthetic refusals (except the first, the parser's real answer) mapped through the line's sources."""
    assert problem(line, result) == expected


def test_a_variable_behind_several_culprits_is_named_once() -> None:
    """Culprits that map to the same variable (here two extra args) are named once, in first-seen order."""
    extra = ["--a", "--b"]
    sources = {
        "--a": ("sglang_router_extra_args", extra),
        "--b": ("sglang_router_extra_args", extra),
        "--port": ("sglang_router.port", 1),
    }
    line = Line("r", "router", [], {}, sources)
    result = {"ok": False, "error": "E", "culprits": ["--a", "--b", "--port", "--a"]}
    assert problem(line, result) == (
        "r: sglang_router_extra_args=['--a', '--b'] with r: sglang_router.port=1: smg 1.13.0 refuses the rendered "
        "router command line at startup: E; fix: change sglang_router_extra_args or sglang_router.port so that "
        "smg 1.13.0's own check accepts it"
    )


# --- which checkers can run ----------------------------------------------------------------------------------

NO_PARSER = (
    "the deep check of the engine command lines is skipped: no SGLang parser venv at {}; fix: run `make parser-venv`"
)
NO_SMG = "the deep check of the router command lines is skipped: no smg python given"
BAD_SMG = (
    "the deep check of the router command lines is skipped: {} cannot import smg; fix: run `make venv` "
    "(requirements/dev.txt installs smg==1.13.0)"
)
OFF = "the deep check is off (sglang_validate_deep_check: false)"


@pytest.mark.parametrize("mode", ["false", "No", "OFF", "0", False, 0])
def test_mode_off_runs_nothing(mode: object) -> None:
    """false/no/off/0 in any case, or a YAML false: both checks off, one warning."""
    assert resolve_pythons({"mode": mode, "parser_python": "/bin/sh", "smg_python": "/bin/sh"}) == (None, None, [OFF])


@pytest.mark.parametrize("mode", [None, "auto", "true", "ON"])
def test_usable_pythons_are_returned_without_warnings(
    rig: Rig, mode: str | None, capfd: pytest.CaptureFixture[str]
) -> None:
    """The smg python must import smg.launch_router (quietly); the parser python must be executable."""
    settings = {"parser_python": rig.sglang, "smg_python": rig.smg}
    if mode is not None:
        settings["mode"] = mode
    assert resolve_pythons(settings) == (rig.sglang, rig.smg, [])
    assert Path(rig.smg + ".probe").read_text() == "import smg.launch_router\n"
    assert capfd.readouterr() == ("", "")


def test_missing_pythons_are_skipped_with_the_fix(tmp_path: Path) -> None:
    """Unset or missing pythons: each check skipped with its fix."""
    assert resolve_pythons({}) == (None, None, [NO_PARSER.format("(unset)"), NO_SMG])
    missing = str(tmp_path / "none" / "python")
    assert resolve_pythons({"parser_python": missing, "smg_python": None}) == (
        None,
        None,
        [NO_PARSER.format(missing), NO_SMG],
    )


def test_a_parser_python_that_is_not_executable_is_skipped(rig: Rig) -> None:
    """A parser python without the execute bit is skipped; smg still runs."""
    Path(rig.sglang).chmod(0o644)
    assert resolve_pythons({"parser_python": rig.sglang, "smg_python": rig.smg}) == (
        None,
        rig.smg,
        [NO_PARSER.format(rig.sglang)],
    )


def test_an_smg_python_that_cannot_import_smg_is_skipped(tmp_path: Path) -> None:
    """A failed `import smg.launch_router` skips the router check with the fix."""
    smg = interpreter(venv(tmp_path / "ctl"), probe=1)
    parser = interpreter(venv(tmp_path / "parser"))
    assert resolve_pythons({"parser_python": parser, "smg_python": smg}) == (parser, None, [BAD_SMG.format(smg)])


# --- the whole check -----------------------------------------------------------------------------------------

ZERO = {"checked": 0, "cached": 0, "seconds": 0}


def settings_for(rig: Rig, **more: Any) -> dict[str, Any]:
    return {
        "mode": "auto",
        "parser_python": rig.sglang,
        "smg_python": rig.smg,
        "models_dir": str(MODELS),
        "model_name": "deepseek-v4-flash",
        "files_dir": str(rig.files),
        **more,
    }


def test_off_and_nothing_to_run_return_at_once() -> None:
    """Off, or no python for either tool: warnings only, zero stats."""
    assert deep_check({"gpu-1": fleet()}, GROUPS, {"mode": "false"}) == {
        "problems": [],
        "warnings": [OFF],
        "stats": ZERO,
    }
    assert deep_check({"gpu-1": fleet()}, GROUPS, {}) == {
        "problems": [],
        "warnings": [NO_PARSER.format("(unset)"), NO_SMG],
        "stats": ZERO,
    }


@pytest.mark.parametrize("mode", ["true", "Yes", "on", "1", True, 1])
def test_mode_true_turns_a_skip_into_a_problem(mode: object) -> None:
    """true/yes/on/1 in any case: each skip warning becomes a 'cannot run' problem."""
    assert deep_check({"gpu-1": fleet()}, GROUPS, {"mode": mode}) == {
        "problems": [
            "the deep check of the engine command lines cannot run (sglang_validate_deep_check: true): no SGLang "
            "parser venv at (unset); fix: run `make parser-venv`",
            "the deep check of the router command lines cannot run (sglang_validate_deep_check: true): no smg "
            "python given",
        ],
        "warnings": [],
        "stats": ZERO,
    }


def test_mode_true_with_only_smg_reports_the_parser_and_checks_the_router(rig: Rig, clock: None) -> None:
    """The missing parser is a problem; the router line still runs."""
    rig.answer(SMG, [{"id": "2", **SMG_OK}])
    result = deep_check({"gpu-1": fleet()}, GROUPS, settings_for(rig, mode="TRUE", parser_python=""))
    assert result == {
        "problems": [
            "the deep check of the engine command lines cannot run (sglang_validate_deep_check: true): no SGLang "
            "parser venv at (unset); fix: run `make parser-venv`"
        ],
        "warnings": [],
        "stats": {"checked": 1, "cached": 0, "seconds": 12.3},
    }


def test_refusals_become_problems_and_lines_use_the_models_dir(rig: Rig, tmp_path: Path) -> None:
    """Each server's line is checked; refusals map to problems in line order; --model-path is models/<name>."""
    rig.answer(SGL, [{"id": "0", **SMG_OK}, {"id": "1", **SGLANG_REFUSAL}])
    rig.answer(SMG, [{"id": "2", "ok": False, "error": "E", "culprits": ["--queue-size"]}])
    result = deep_check({"gpu-1": fleet()}, GROUPS, settings_for(rig, smg_python=rig.smg))
    assert result["problems"] == [
        "gpu-1: sglang_engine_common.kv_cache_dtype='fp8_e4m3': SGLang 0.5.23 refuses the rendered decode engine "
        "command line at startup: AssertionError: mxfp8 is not supported for DeepseekV4ForCausalLM; fix: change "
        f"sglang_engine_common.kv_cache_dtype so that {SG_TAIL}",
        "gpu-1: sglang_router.queue_size=16: smg 1.13.0 refuses the rendered router command line at startup: E; "
        "fix: change sglang_router.queue_size so that smg 1.13.0's own check accepts it",
    ]
    assert result["warnings"] == []
    assert (result["stats"]["checked"], result["stats"]["cached"]) == (3, 0)
    model = str(MODELS.resolve() / "m1")
    argvs = [case["argv"] for case in rig.request(SGL)["cases"]]
    assert argvs == [[model if a == "/ctl/models/m1" else a for a in argv] for argv in (PREFILL_ARGV, DECODE_ARGV)]
    assert rig.request(SGL)["cases"][0]["environ"] == {"SGLANG_DSV4_BF16_INDEX_K": "1"}
    assert rig.request(SMG)["cases"][0]["argv"] == ROUTER_ARGV


def test_the_default_models_dir_is_the_repository_models(rig: Rig) -> None:
    """Without models_dir, --model-path is under the repository's models/."""
    rig.answer(SGL, [{"id": "0", **SMG_OK}, {"id": "1", **SMG_OK}])
    settings = settings_for(rig, smg_python="")
    del settings["models_dir"]
    result = deep_check({"gpu-1": fleet()}, GROUPS, settings)
    assert result["problems"] == [] and result["warnings"] == [NO_SMG]
    assert rig.request(SGL)["cases"][0]["argv"][:2] == ["--model-path", str(MODELS.resolve() / "m1")]


@pytest.mark.parametrize(
    ("model_name", "config"),
    [("m1", b'{"m1": 1}'), ("no-such-model", b""), (None, b'{"top": 1}')],
    ids=["named", "no-config", "unnamed"],
)
def test_results_are_cached_under_the_model_config(
    rig: Rig, tmp_path: Path, model_name: str | None, config: bytes
) -> None:
    """The cache dir holds one entry per line, keyed with models_dir/model_name/config.json (b'' when absent,
    models_dir/config.json without a name), --model-path under models_dir; a second run reads them all."""
    models = tmp_path / "models"
    (models / "m1").mkdir(parents=True)
    (models / "m1" / "config.json").write_bytes(b'{"m1": 1}')
    (models / "config.json").write_bytes(b'{"top": 1}')
    cache = tmp_path / "cache"
    rig.answer(SGL, [{"id": "0", **SMG_OK}, {"id": "1", **SMG_OK}])
    rig.answer(SMG, [{"id": "2", **SMG_OK}])
    settings = settings_for(rig, models_dir=str(models), model_name=model_name, cache_dir=str(cache))
    first = deep_check({"gpu-1": fleet()}, GROUPS, settings)
    assert first["problems"] == [] and (first["stats"]["checked"], first["stats"]["cached"]) == (3, 0)
    assert rig.request(SGL)["cases"][1]["argv"][:2] == ["--model-path", str(models.resolve() / "m1")]
    lines, _ = command_lines({"gpu-1": fleet()}, GROUPS, models.resolve())
    pythons = {"sglang": rig.sglang, "smg": rig.smg}
    keys = {f"{cache_key(line, pythons[line.tool], rig.files, config)}.json" for line in lines}
    assert set(os.listdir(cache)) == keys
    rig.answer(SGL, "broken")
    again = deep_check({"gpu-1": fleet()}, GROUPS, settings)
    assert again["problems"] == [] and (again["stats"]["checked"], again["stats"]["cached"]) == (3, 3)


def test_without_a_cache_dir_nothing_is_written(rig: Rig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty cache_dir means no cache (not the current directory)."""
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    rig.answer(SGL, [{"id": "0", **SMG_OK}, {"id": "1", **SMG_OK}])
    rig.answer(SMG, [{"id": "2", **SMG_OK}])
    result = deep_check({"gpu-1": fleet()}, GROUPS, settings_for(rig, cache_dir=""))
    assert result["problems"] == [] and result["stats"]["checked"] == 3
    assert os.listdir(work) == []


@pytest.mark.parametrize(
    ("broken", "expected"),
    [
        ("checker", "the deep check could not run: {smg} {files}/smg_startup_check.py failed with exit status 0: E"),
        ("files", "the deep check could not run: [Errno 2] No such file or directory: '{files}/smg_startup_check.py'"),
        ("python", "the deep check could not run: [Errno 2] No such file or directory: '{smg}.gone'"),
    ],
)
def test_a_check_that_cannot_run_is_a_problem(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, broken: str, expected: str
) -> None:
    """A checker that fails, a missing files dir or an interpreter gone after the probe: one problem, no stats;
    the warnings of the skipped tool are kept."""
    rig.answer(SMG, "E")
    if broken == "files":
        for path in rig.files.iterdir():
            path.unlink()
    if broken == "python":
        gone = (None, rig.smg + ".gone", [NO_PARSER.format("(unset)")])
        monkeypatch.setattr(sglang_deep, "resolve_pythons", lambda settings: gone)
    result = deep_check({"gpu-1": fleet()}, GROUPS, settings_for(rig, parser_python=""))
    assert result == {
        "problems": [expected.format(smg=rig.smg, files=rig.files)],
        "warnings": [NO_PARSER.format("(unset)")],
        "stats": {},
    }


def test_results_that_do_not_match_the_lines_are_not_dropped_silently(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every line has its result: a results list shorter than the lines is an error, not fewer problems."""
    monkeypatch.setattr(sglang_deep, "run_checkers", lambda *args: ([SGLANG_REFUSAL], ZERO))
    with pytest.raises(ValueError, match="zip"):
        deep_check({"gpu-1": fleet()}, GROUPS, settings_for(rig))


def test_a_missing_smg_python_is_skipped_with_the_fix(tmp_path: Path) -> None:
    """Like a missing parser python: a warning with the fix, not a crash of the validate role."""
    missing = str(tmp_path / "none" / "python")
    assert resolve_pythons({"smg_python": missing}) == (
        None,
        None,
        [NO_PARSER.format("(unset)"), BAD_SMG.format(missing)],
    )


def test_the_smg_probe_imports_smg_with_a_real_python(tmp_path: Path) -> None:
    """The probe runs `python -c 'import smg.launch_router'`: the venv's python has smg, the system's may not."""
    import sys

    from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_deep import _imports_smg

    assert _imports_smg(sys.executable) is True
    assert _imports_smg(str(tmp_path / "no" / "python")) is False


def _smg_checker() -> Any:
    spec = importlib.util.spec_from_file_location("smg_startup_check", FILES_DIR / "smg_startup_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_stand_in_ports_of_a_line_are_distinct_while_declared_equal_ports_stay_equal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The OS may hand a port closed a moment ago to the next bind: the checker must not close one stand-in before it
    # takes the next. A kernel that always offers the lowest free port shows it.
    checker = _smg_checker()
    offered: list[int] = []

    class LowestFirst:
        held: ClassVar[set[int]] = set()

        def __init__(self) -> None:
            self.port = 0

        def bind(self, _address: tuple[str, int]) -> None:
            self.port = next(p for p in range(40000, 40100) if p not in LowestFirst.held)
            LowestFirst.held.add(self.port)
            offered.append(self.port)

        def getsockname(self) -> tuple[str, int]:
            return ("127.0.0.1", self.port)

        def close(self) -> None:
            LowestFirst.held.discard(self.port)

    monkeypatch.setattr(checker.socket, "socket", LowestFirst)
    line, main, ports = checker.isolated(["--port", "8000", "--prometheus-port", "29000", "--decode", "http://d:1"])
    assert len(set(ports.values())) == 2 and main == ports["8000"]
    assert line[line.index("--prometheus-port") + 1] == str(ports["29000"]) != str(main)
    assert LowestFirst.held == set()  # every stand-in is let go before smg starts
    _line, _main, same = checker.isolated(["--port", "8000", "--prometheus-port", "8000"])
    assert list(same) == ["8000"]  # a clash the declaration has stays a clash
