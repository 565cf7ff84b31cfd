"""The problems `server_problems` (module_utils/sglang_preflight.py) names for the paths a server reads, the modules it
imports and the GPUs it opens, each written out whole by hand."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_preflight import (
    PROBE,
    RELEASE_CHECK,
    engine_imports,
    probe_argv,
    release_check_argv,
    release_problems,
    server_problems,
)

UNIT = "sglang-dsv4-decode"
SERVER = {"role": "decode", "unit": UNIT, "user": "sglang", "gpu_ids": []}
PYTHON = "/opt/sglang/current/venv/bin/python"

ENOENT = (
    "does not exist as the unit sees it (ProtectHome= hides /home, /root and /run/user; PrivateTmp= gives it its "
    "own /tmp)"
)
DENIED = (
    "is not readable by the unit's user sglang (the file modes, or the unit's sandbox: ProtectHome= makes /home, "
    "/root and /run/user inaccessible)"
)


def nobody(port: int) -> list[dict[str, Any]]:
    return []


def path_problem(path: str, declared: str, reason: str) -> str:
    return (
        f"{UNIT}: {path} ({declared}) {reason}. Put it where the unit can read it, with read access for sglang, and "
        f"declare that path in {declared}."
    )


# (the probe's row for the one declared path, the reason the problem gives); None: no problem.
PATH_ROWS = [
    ({"path": "/models/x", "result": "read"}, None),
    ({"path": "/models/x", "result": "ENOENT", "error": "ENOENT: No such file or directory"}, ENOENT),
    ({"path": "/models/x", "result": "EACCES", "error": "EACCES: Permission denied"}, DENIED),
    ({"path": "/models/x", "result": "EPERM", "error": "EPERM: Operation not permitted"}, DENIED),
    ({"path": "/models/x", "result": "ELOOP", "error": "ELOOP: Too many levels of symbolic links"},
     "ELOOP: Too many levels of symbolic links"),
    ({"path": "/models/x", "result": "error"}, "error"),
]  # fmt: skip


@pytest.mark.parametrize(("row", "reason"), PATH_ROWS, ids=[f"{r['result']}-{i}" for i, (r, _) in enumerate(PATH_ROWS)])
def test_each_path_result_gives_its_reason(row: dict[str, Any], reason: str | None) -> None:
    server = {**SERVER, "path_vars": ["sglang_model.path"]}
    answer = {"listeners": [], "paths": [row]}
    assert server_problems(server, answer, nobody) == (
        [path_problem("/models/x", "sglang_model.path", reason)] if reason else []
    )


def test_a_readable_path_is_passed_over_and_the_next_one_still_judged() -> None:
    server = {**SERVER, "path_vars": ["sglang_model.path", "sglang_model.tokenizer_path"]}
    answer = {"listeners": [], "paths": [{"path": "/m", "result": "read"}, {"path": "/t", "result": "ENOENT"}]}
    assert server_problems(server, answer, nobody) == [path_problem("/t", "sglang_model.tokenizer_path", ENOENT)]


def test_paths_beyond_the_declared_variables_are_not_judged() -> None:
    server = {**SERVER, "path_vars": ["sglang_model.path"]}
    answer = {"listeners": [], "paths": [{"path": "/m", "result": "ENOENT"}, {"path": "/extra", "result": "EACCES"}]}
    assert server_problems(server, answer, nobody) == [path_problem("/m", "sglang_model.path", ENOENT)]


def test_a_server_without_declared_paths_has_no_path_problems() -> None:
    answer = {"listeners": [], "paths": [{"path": "/m", "result": "ENOENT"}]}
    assert server_problems(SERVER, answer, nobody) == []


def import_problem(name: str, result: str, why: str) -> str:
    return (
        f"{UNIT}: module {name} is {result} in the release's Python {PYTHON}, and {why}. Install it into the release "
        "(sglang_build_requirements; sglang_engine_requirements for a wheelhouse release) or declare another "
        "sglang_decode.disaggregation_transfer_backend."
    )


def test_a_found_module_is_fine_and_a_missing_one_names_why_the_engine_imports_it() -> None:
    why = "disaggregation_transfer_backend nixl imports it (package nixl==1.5.2)"
    server = {**SERVER, "python": PYTHON, "import_reasons": {"nixl._api": why}}
    imports = {"sglang": "found", "nixl._api": "not found (ImportError: libcuda.so.1)"}
    answer = {"listeners": [], "paths": [], "imports": imports}
    assert server_problems(server, answer, nobody) == [
        import_problem("nixl._api", "not found (ImportError: libcuda.so.1)", why)
    ]


def test_a_missing_module_without_a_declared_reason_says_the_server_imports_it() -> None:
    answer = {"listeners": [], "paths": [], "imports": {"sglang": "not found"}}
    assert server_problems({**SERVER, "python": PYTHON}, answer, nobody) == [
        import_problem("sglang", "not found", "the server imports it")
    ]


def test_a_module_without_its_reason_among_other_reasons_says_the_server_imports_it() -> None:
    server = {**SERVER, "python": PYTHON, "import_reasons": {"mooncake.engine": "the backend imports it"}}
    answer = {"listeners": [], "paths": [], "imports": {"sglang_sim": "no executable /x"}}
    assert server_problems(server, answer, nobody) == [
        import_problem("sglang_sim", "no executable /x", "the server imports it")
    ]


def gpu_problem(opened: int, ids: list[int]) -> str:
    return (
        f"{UNIT}: the unit can open {opened} of the {len(ids)} GPU(s) in sglang_decode.gpu_ids {ids} (/dev/nvidia<id> "
        "under its DeviceAllow=). Declare GPUs this host has in sglang_decode.gpu_ids, or let the unit open them "
        "(sglang_engine_gpu_access, sglang_engine_device_allow)."
    )


# (declared GPU ids, GPUs the probe opened, whether that is a problem)
GPUS = [
    ([0, 1], 2, False),
    ([0, 1], 3, False),
    ([0, 1], 1, True),
    ([0], 0, True),
    ([0], None, True),
    ([], None, False),
    ([], 0, False),
]


@pytest.mark.parametrize(("ids", "opened", "short"), GPUS, ids=[f"{len(g[0])}-{g[1]}" for g in GPUS])
def test_the_unit_must_open_every_declared_gpu(ids: list[int], opened: int | None, short: bool) -> None:
    answer = {"listeners": [], "paths": [], "gpus": opened}
    expected = [gpu_problem(opened or 0, ids)] if short else []
    assert server_problems({**SERVER, "gpu_ids": ids}, answer, nobody) == expected


def test_an_answer_without_a_gpu_count_opened_none() -> None:
    answer = {"listeners": [], "paths": []}
    assert server_problems({**SERVER, "gpu_ids": [4, 5]}, answer, nobody) == [gpu_problem(0, [4, 5])]


def test_engine_imports_say_why_each_module_is_imported() -> None:
    argv = ["/opt/sglang/current/venv/bin/python", "-m", "sglang.launch_server", "--port", "30000"]
    assert engine_imports(argv, "mooncake_tcp") == {
        "sglang": "the engine's command runs sglang",
        "mooncake.engine": "disaggregation_transfer_backend mooncake_tcp imports it "
        "(package mooncake-transfer-engine==0.3.11.post1)",
    }
    assert engine_imports(["/usr/bin/sglang_sim", "-m"], "nixl") == {
        "sglang": "the engine's command runs sglang",
        "nixl._api": "disaggregation_transfer_backend nixl imports it (package nixl==1.5.2)",
    }


def startup_refusal(error: str, named: str) -> str:
    return (
        f"{UNIT}: SGLang's own startup checks, run in the release's Python {PYTHON} as the unit runs (its user, "
        f"sandbox and environment file), refuse its command line: {error} (flags and variables it names: {named}). "
        "The deep check ran the same checks on the controller; what differs is the release's SGLang or this host's "
        "environment. Fix the declared value behind them (sglang_decode.*, sglang_engine_extra_env) or the release."
    )


# (SGLang's startup check as the probe ran it, the problem); None: no problem.
STARTUP_CHECKS = [
    (None, None),
    ({}, None),
    ({"ok": True, "culprits": [], "error": ""}, None),
    ({"skipped": "the release's Python /x has no sglang"}, None),
    ({"ok": False, "culprits": ["--page-size", "SGLANG_DSV4_BF16_INDEX_K"], "error": "ValueError: page"},
     startup_refusal("ValueError: page", "--page-size, SGLANG_DSV4_BF16_INDEX_K")),
    ({"ok": False, "culprits": [], "error": "the check did not finish within 120 s"},
     startup_refusal("the check did not finish within 120 s", "none named")),
    ({"ok": False, "culprits": None}, startup_refusal("None", "none named")),
]  # fmt: skip


@pytest.mark.parametrize(("check", "problem"), STARTUP_CHECKS, ids=[str(i) for i in range(len(STARTUP_CHECKS))])
def test_sglangs_own_startup_check_on_the_host(check: dict[str, Any] | None, problem: str | None) -> None:
    answer = {"listeners": [], "paths": [], "sglang_check": check}
    assert server_problems({**SERVER, "python": PYTHON}, answer, nobody) == ([problem] if problem else [])


def test_the_probe_and_the_release_check_run_isolated_with_json_arguments() -> None:
    spec = {"listeners": [["*", 30001]], "paths": [], "python": None, "imports": [], "gpu_ids": [0]}
    assert probe_argv("/usr/bin/python3", spec) == [
        "/usr/bin/python3",
        "-I",
        "-c",
        PROBE,
        '{"listeners": [["*", 30001]], "paths": [], "python": null, "imports": [], "gpu_ids": [0]}',
    ]
    imports = {"sglang": "the engine's command runs sglang", "mooncake.engine": "the backend imports it"}
    assert release_check_argv("/v/bin/python", imports, ["torch"]) == [
        "/v/bin/python",
        "-I",
        "-c",
        RELEASE_CHECK,
        '["torch"]',
        '["sglang", "mooncake.engine"]',
    ]


def test_a_preload_that_fails_is_imported_first_and_a_missing_library_says_where_it_comes_from() -> None:
    answer = {
        "torch": "ImportError: libcudart.so.12: cannot open shared object file",
        "sglang": "ok",
        "nixl._api": "ImportError: libcuda.so.1: cannot open shared object file",
        "mooncake.engine": "ImportError: libnuma.so.1: cannot open shared object file",
        "other": "ModuleNotFoundError: No module named 'other'",
    }
    imports = {"sglang": "the engine's command runs sglang", "nixl._api": "nixl imports it",
               "mooncake.engine": "mooncake imports it", "other": "the server imports it"}  # fmt: skip
    assert release_problems("/r/bin/python", answer, imports, "") == [
        "module torch does not import in the new release's Python /r/bin/python (ImportError: libcudart.so.12: "
        "cannot open shared object file); imported first, as SGLang does. libcudart.so.12 is the CUDA 12 runtime, "
        "which torch loads first (the release has no CUDA build of torch).",
        "module nixl._api does not import in the new release's Python /r/bin/python (ImportError: libcuda.so.1: "
        "cannot open shared object file); nixl imports it. libcuda.so.1 is the NVIDIA driver's library (the host has "
        "no NVIDIA driver).",
        "module mooncake.engine does not import in the new release's Python /r/bin/python (ImportError: libnuma.so.1: "
        "cannot open shared object file); mooncake imports it. libnuma.so.1 is libnuma (apt install libnuma1).",
        "module other does not import in the new release's Python /r/bin/python (ModuleNotFoundError: No module "
        "named 'other'); the server imports it.",
    ]
