"""The origin of every kind of drift, pinned through the judge (sglang_drift.judge, what the audit, the verify suite and
the drift exporter call): for each way a value leaves the declaration, the layer it first leaves it at, every layer
that differs and the explanation, written out by hand. Each case is one where another origin would be wrong.

Layers of one server: declared (the inventory), on disk (the files on the host), running (the process's argv) and
effective (what the engine applies); `deployed` is the envelope the last deploy recorded on the host.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_drift import (
    Drift,
    LiveContext,
    change_summary,
    effective_gap,
    judge,
    same,
)
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_engine_live import IGNORED

KEY = "context_length"
FULL, HALF, QUARTER = 524_288, 262_144, 131_072

DECLARATION_CHANGED = "the declaration changed since the last deploy, which wrote {}: run site.yml"
EDITED_NOT_APPLIED = "edited on the host; the process still runs the declared value (a restart would apply the edit)"
EDITED_AND_RESTARTED = "edited on the host (or the declaration changed without a deploy) and applied by a restart"
FILES_DIFFER = "the files on the host differ from the declaration"
STARTED_BY_HAND = "the process runs with a value its files do not have (started or restarted by hand)"
RESTART_PENDING = "the files changed after the process started: restart the unit to apply them"


def drift_of(declared: int | None, **host: Any) -> list[dict[str, Any]]:
    """The drift the judge finds for one decode engine whose only key is context_length; `live` (the effective
    value) goes to the live side, the rest to the host snapshot."""
    effective = host.pop("live", None)
    live = {"live": {KEY: effective}} if effective is not None else None
    verdict = judge("decode", {KEY: declared}, host, live)
    return [asdict(d) for d in verdict.drift]


def item(layer: str, layers: list[str], declared: Any, live: Any, explanation: str) -> dict[str, Any]:
    return asdict(Drift(KEY, layer, layers, declared, live, "drift", explanation))


CASES = [
    pytest.param(
        HALF,
        {"deployed": {KEY: FULL}, "on_disk": {KEY: FULL}, "running": {KEY: FULL}},
        item("declared", ["on_disk", "running"], HALF, FULL, DECLARATION_CHANGED.format(FULL)),
        id="declaration-changed-files-and-process-as-deployed",
    ),
    pytest.param(
        # The files are as the last deploy wrote them; the process was restarted by hand with another value. The
        # declaration still changed since the deploy, and that comes first.
        HALF,
        {"deployed": {KEY: FULL}, "on_disk": {KEY: FULL}, "running": {KEY: QUARTER}},
        item("declared", ["on_disk", "running"], HALF, FULL, DECLARATION_CHANGED.format(FULL)),
        id="declaration-changed-process-restarted-by-hand",
    ),
    pytest.param(
        HALF,
        {"deployed": {KEY: FULL}, "running": {KEY: FULL}},
        item("declared", ["running"], HALF, FULL, DECLARATION_CHANGED.format(FULL)),
        id="declaration-changed-files-not-read",
    ),
    pytest.param(
        # The declaration changed since the deploy AND the files were edited on the host: the files match neither
        # the declaration nor the deploy, so they are where the value left, not the declaration.
        HALF,
        {"deployed": {KEY: FULL}, "on_disk": {KEY: QUARTER}, "running": {KEY: FULL}},
        item("on_disk", ["on_disk", "running"], HALF, QUARTER, FILES_DIFFER),
        id="hand-edit-after-a-declaration-change",
    ),
    pytest.param(
        FULL,
        {"deployed": {KEY: FULL}, "on_disk": {KEY: HALF}, "running": {KEY: FULL}},
        item("on_disk", ["on_disk"], FULL, HALF, EDITED_NOT_APPLIED),
        id="hand-edit-not-applied",
    ),
    pytest.param(
        FULL,
        {"deployed": {KEY: FULL}, "on_disk": {KEY: HALF}, "running": {KEY: HALF}},
        item("on_disk", ["on_disk", "running"], FULL, HALF, EDITED_AND_RESTARTED),
        id="hand-edit-applied-by-a-restart",
    ),
    pytest.param(
        FULL,
        {"on_disk": {KEY: HALF}, "running": {KEY: QUARTER}},
        item("on_disk", ["on_disk", "running"], FULL, HALF, FILES_DIFFER),
        id="files-and-process-each-other-value-no-deploy-record",
    ),
    pytest.param(
        # A flag added to the files of a key the declaration leaves unset, the process not read: nothing says the
        # process still runs without it.
        None,
        {"on_disk": {KEY: HALF}},
        item("on_disk", ["on_disk"], None, HALF, FILES_DIFFER),
        id="flag-added-on-the-host-process-not-read",
    ),
    pytest.param(
        FULL,
        {"deployed": {"port": 30001}, "on_disk": {KEY: HALF}},
        item("on_disk", ["on_disk"], FULL, HALF, FILES_DIFFER),
        id="hand-edit-of-a-key-the-deploy-did-not-record",
    ),
    pytest.param(
        FULL,
        {"deployed": {KEY: FULL}, "on_disk": {KEY: FULL}, "running": {KEY: HALF}},
        item("running", ["running"], FULL, HALF, STARTED_BY_HAND),
        id="process-started-by-hand",
    ),
    pytest.param(
        # The last deploy recorded no value of the key: nothing says the declaration changed since.
        FULL,
        {"deployed": {"port": 30001}, "running": {KEY: HALF}},
        item("running", ["running"], FULL, HALF, STARTED_BY_HAND),
        id="process-started-by-hand-key-not-recorded-files-not-read",
    ),
    pytest.param(
        FULL,
        {"deployed": {KEY: FULL}, "on_disk": {KEY: FULL}, "running": {KEY: HALF}, "restart_pending": True},
        item("running", ["running"], FULL, HALF, RESTART_PENDING),
        id="files-changed-after-the-process-started",
    ),
    pytest.param(
        FULL,
        {"on_disk": {KEY: FULL}, "running": {KEY: HALF}, "live": HALF},
        item("running", ["running", "effective"], FULL, HALF, STARTED_BY_HAND),
        id="engine-applies-what-the-process-was-started-with",
    ),
    pytest.param(
        FULL,
        {"deployed": {KEY: FULL}, "on_disk": {KEY: FULL}, "running": {KEY: FULL}, "live": HALF},
        item("effective", ["effective"], FULL, HALF, f"/v1/models max_model_len is {HALF}, the declaration {FULL}"),
        id="engine-applies-another-value-than-its-argv",
    ),
]


@pytest.mark.parametrize(("declared", "host", "expected"), CASES)
def test_the_origin_of_an_envelope_value(declared: int | None, host: dict[str, Any], expected: dict[str, Any]) -> None:
    assert drift_of(declared, **host) == [expected]


def test_no_layer_differs_no_drift() -> None:
    assert drift_of(FULL, deployed={KEY: FULL}, on_disk={KEY: FULL}, running={KEY: FULL}, live=FULL) == []


# ---------------------------------------------------------------- an interrupted deploy

SINCE = "2026-11-30T12:00:00Z"
# change_summary: `key old -> new` against the last deploy's record, then the marker's files.
INTERRUPTED = f"interrupted deploy of {KEY} {HALF} -> {FULL}, files script at {SINCE}: rerun site.yml"


def test_an_interrupted_deploy_explains_the_gap_and_keeps_its_origin() -> None:
    """A deploy of 524,288 (the last one wrote 262,144) wrote the script and stopped before the restart: the process
    still runs 262,144. The value leaves the declaration at the running layer; the marker explains why."""
    marker = {"since": SINCE, "envelope": {KEY: FULL}, "files": ["script"]}
    host = {"deployed": {KEY: HALF}, "on_disk": {KEY: FULL}, "running": {KEY: HALF}, "in_progress": marker}
    assert drift_of(FULL, **host) == [
        item("running", ["running"], FULL, HALF, INTERRUPTED),
        asdict(Drift("deploy", "on_disk", ["on_disk"], None, SINCE, "drift", INTERRUPTED)),
    ]


def test_an_interrupted_deploy_does_not_explain_what_the_engine_applies() -> None:
    """Files and process carry the declaration; the engine applies another value. The unfinished deploy did not
    cause that gap, so it keeps the engine's explanation."""
    marker = {"since": SINCE, "envelope": {KEY: FULL}, "files": ["script"]}
    host = {"deployed": {KEY: HALF}, "on_disk": {KEY: FULL}, "running": {KEY: FULL}, "live": HALF,
            "in_progress": marker}  # fmt: skip
    assert drift_of(FULL, **host) == [
        item("effective", ["effective"], FULL, HALF, f"/v1/models max_model_len is {HALF}, the declaration {FULL}"),
        asdict(Drift("deploy", "on_disk", ["on_disk"], None, SINCE, "drift", INTERRUPTED)),
    ]


# ---------------------------------------------------------------- the host beyond the envelope

ENV_FILE = "/etc/sglang/dsv4-decode.env"


def test_the_origin_of_each_host_drift() -> None:
    """Metadata, leftovers and an unfinished release switch are all on the host's disk; releases left over are
    information only."""
    host = {
        "files": {"env_file": {"path": ENV_FILE, "exists": True, "owner": "root", "group": "root", "mode": "0644"}},
        "backups": [f"{ENV_FILE}.1234.2026-11-30@12:00:00~"],
        "releases": ["/opt/sglang/releases/r0"],
        "release_switch": {"to": "r2", "from": "r1", "since": SINCE},
    }
    declared_files = {"env_file": {"owner": "root", "group": "sglang", "mode": "0640"}}
    verdict = judge("decode", {KEY: FULL}, host, declared_files=declared_files)
    assert [asdict(d) for d in verdict.drift] == [
        asdict(Drift(
            "release", "on_disk", ["on_disk"], None, "r2", "drift",
            f"interrupted switch to release r2 (from r1) at {SINCE}: not every engine of the host runs the current "
            "release; rerun site.yml",
        )),
        asdict(Drift(
            "file:env_file", "on_disk", ["on_disk"], "root:sglang 0640", "root:root 0644", "drift",
            f"{ENV_FILE} is root:root 0644, the roles declare root:sglang 0640 (group, mode differ): changed on the "
            "host or left by an interrupted rollback; rerun site.yml",
        )),
        asdict(Drift(
            "backups", "on_disk", ["on_disk"], [], [f"{ENV_FILE}.1234.2026-11-30@12:00:00~"], "drift",
            "backup copies left by a deploy that did not finish (a finished deploy removes them once the server "
            "passed its gate): rerun site.yml",
        )),
        asdict(Drift(
            "releases", "on_disk", ["on_disk"], [], ["/opt/sglang/releases/r0"], "info",
            "releases that are neither current, previous nor among the newest kept (one without manifest.json is an "
            "install or switch that did not finish); the next release install prunes them, or remove them by hand",
        )),
    ]  # fmt: skip


def test_the_origin_of_a_worker_the_router_does_not_route_as_declared() -> None:
    """The router's worker list is what smg applies: a missing or an unexpected worker is effective drift."""
    live = {"router": {"workers": [{"type": "decode", "url": "http://d1:30001"},
                                   {"type": "decode", "url": "http://d9:30001/"}]}}  # fmt: skip
    expected = {"prefill": [], "decode": [{"url": "http://d1:30001"}, {"url": "http://d2:30001"}]}
    verdict = judge("router", {"port": 8000}, {}, live, expected_workers=expected)
    assert [asdict(d) for d in verdict.drift] == [
        asdict(Drift("workers", "effective", ["effective"], "http://d2:30001", None, "drift",
                     "decode worker http://d2:30001 missing: the router does not route to it; site.yml puts it back")),
        asdict(Drift("workers", "effective", ["effective"], None, "http://d9:30001", "drift",
                     "decode worker http://d9:30001 unexpected: the inventory does not declare it")),
    ]  # fmt: skip


# ---------------------------------------------------------------- the router, and what the engine echoes

ROUTER_KEY = "max_concurrent_requests"


@pytest.mark.parametrize(
    ("on_disk", "running", "layer", "explanation"),
    [
        (256, 192, "on_disk", EDITED_NOT_APPLIED),  # its script edited on the host, the process as declared
        (192, 256, "running", STARTED_BY_HAND),  # the process runs 256, its script and the declaration 192
    ],
    ids=["router-script-edited", "router-started-by-hand"],
)
def test_the_origin_of_a_router_limit(on_disk: int, running: int, layer: str, explanation: str) -> None:
    """The router's effective limits are its argv (smg reports none over HTTP): the origin is the files or the
    process, and the effective value is the running one."""
    verdict = judge("router", {ROUTER_KEY: 192}, {"on_disk": {ROUTER_KEY: on_disk}, "running": {ROUTER_KEY: running}})
    live = on_disk if layer == "on_disk" else running
    assert [asdict(d) for d in verdict.drift] == [
        asdict(Drift(ROUTER_KEY, layer, [layer], 192, live, "drift", explanation))
    ]
    (row,) = [r for r in verdict.rows if r.key == ROUTER_KEY]
    assert row.values == {"declared": 192, "on_disk": on_disk, "running": running, "effective": running}


def test_an_engine_explains_its_running_slots_from_its_pool_and_echo() -> None:
    """Declared 128 running requests; the engine's pool holds 101 tokens (its memory report), so SGLang applies
    min(128, 101 // 2) = 50, and /server_info echoes the 128 asked."""
    key = "max_running_requests"
    host = {"on_disk": {key: 128}, "running": {key: 128}}
    live = {"live": {key: 50}, "requested": {key: 128}, "live_facts": {"token_capacity": 101}}
    verdict = judge("decode", {key: 128}, host, live)
    explanation = (
        "SGLang applies min(requested // attn_dp_size, token_capacity // 2) per DP rank: the live pool holds 101 "
        "tokens, so token_capacity // 2 = 50; /server_info echoes 128"
    )
    assert [asdict(d) for d in verdict.drift] == [
        asdict(Drift(key, "effective", ["effective"], 128, 50, "drift", explanation))
    ]


def test_a_value_the_engine_ignores_equals_only_itself() -> None:
    """SGLang echoes <ignored> for --max-queued-requests in PD mode: two such readings agree; a number does not."""
    assert same("max_queued_requests", IGNORED, IGNORED) is True
    assert same("max_queued_requests", IGNORED, 5) is False


def test_a_forced_page_size_is_explained_by_the_model() -> None:
    """DeepSeek-V4 runs page_size 256 whatever is declared: the gap names that rule, for that model only."""
    ctx = LiveContext(page_size=256)
    assert effective_gap("page_size", 64, 256, {"dsv4": True}, ctx) == (
        "drift",
        "SGLang forces page_size 256 for DeepSeek-V4",
    )
    assert effective_gap("page_size", 64, 256, {}, ctx) == ("drift", "the engine applies 256, the declaration says 64")


def test_an_interrupted_deploy_lists_only_keys_whose_meaning_changed() -> None:
    """An index-key switch the last deploy did not record and the new one declares false is the same setting (an
    unset bool is false), as is a length read back as text: the summary leaves both out."""
    before = {KEY: "131072", "max_running_requests": 64}
    after = {KEY: 131072, "max_running_requests": 96, "bf16_index_k": False}
    assert change_summary(before, after) == "max_running_requests 64 -> 96"


# Each layer compares by the key's kind (sglang_schema: an unset bool is false, a size read back as text is that
# size), never by Python's ==: a value that means the same setting is not a departure, at any step of the origin.
INDEX_K = "bf16_index_k"


def test_a_deploy_record_without_the_switch_is_not_a_declaration_change() -> None:
    """The last deploy recorded the index-key switch unset, the declaration says false: the same setting. The process
    runs true (started by hand): the origin is the running process, not the declaration."""
    verdict = judge("decode", {INDEX_K: False}, {"deployed": {INDEX_K: None}, "running": {INDEX_K: True}})
    assert [asdict(d) for d in verdict.drift] == [
        asdict(Drift(INDEX_K, "running", ["running"], False, True, "drift", STARTED_BY_HAND))
    ]


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        pytest.param(
            {"deployed": {KEY: HALF}, "on_disk": {KEY: str(HALF)}, "running": {KEY: HALF}},
            item("declared", ["on_disk", "running"], FULL, HALF, DECLARATION_CHANGED.format(HALF)),
            id="files-as-deployed-read-as-text",
        ),
        pytest.param(
            {"on_disk": {KEY: HALF}, "running": {KEY: str(FULL)}},
            item("on_disk", ["on_disk"], FULL, HALF, EDITED_NOT_APPLIED),
            id="process-as-declared-read-as-text",
        ),
        pytest.param(
            {"on_disk": {KEY: HALF}, "running": {KEY: str(HALF)}},
            item("on_disk", ["on_disk", "running"], FULL, HALF, EDITED_AND_RESTARTED),
            id="process-as-the-files-read-as-text",
        ),
    ],
)
def test_the_origin_compares_each_layer_by_its_kind(host: dict[str, Any], expected: dict[str, Any]) -> None:
    assert drift_of(FULL, **host) == [expected]


def test_an_unset_value_is_compared_with_the_prediction_by_its_kind() -> None:
    """Unset max_prefill_tokens, predicted 16,384, read back as the text "16384": no gap."""
    assert effective_gap("max_prefill_tokens", None, "16384", {"max_prefill_tokens": 16384}, LiveContext()) is None
