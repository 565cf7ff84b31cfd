"""plugins/modules/sglang_servers_info.py: every server of a host in one run returns, per server, exactly what
sglang_layers_info and sglang_live_info return for it; a server that cannot be read does not stop the others."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_layers import HostFiles
from audit_helpers import SECRET, FixtureTransport, load_cases, load_library, run_module
from test_sglang_layers import CASES, TICKS, build_host, layout_args

servers_info = load_library("sglang_servers_info")
ENGINE = {"/server_info": {"fixture": "server_info_decode.json"}, "/v1/models": {"fixture": "models.json"}}
ENDPOINT = "http://127.0.0.1:30001"


@pytest.fixture
def decode_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> HostFiles:
    """The decode engine's files and process as deployed (its environment file holds the key)."""
    monkeypatch.setattr(os, "sysconf", lambda name: TICKS if name == "SC_CLK_TCK" else os.sysconf(name))
    case = next(p.values[0] for p in load_cases(CASES) if p.id == "decode_files_and_process_agree")
    return build_host(tmp_path, case)


def decode_read(**extra: Any) -> dict[str, Any]:
    return {"role": "decode", **layout_args("decode"), "endpoint": ENDPOINT, **extra}


def test_each_server_is_what_the_single_readers_return(decode_host: HostFiles) -> None:
    # The engine answers only with the key: the module found it in the environment file it read on the host.
    transport = FixtureTransport(ENGINE, require_key=SECRET)
    got = run_module(servers_info, {"servers": [decode_read()], "name": "lab1"}, transport, decode_host)
    assert not got.get("failed"), got.get("msg")
    [entry] = got["servers"]
    layers = run_module(load_library("sglang_layers_info"), {"role": "decode", "name": "lab1", **layout_args("decode")},
                        host=decode_host)  # fmt: skip
    live_args = {"endpoint": ENDPOINT, "role": "decode", "name": "lab1", "api_key": SECRET}
    live = run_module(load_library("sglang_live_info"), live_args, transport)
    for single in (layers, live):
        single.pop("invocation")
    assert entry == {"role": "decode", "layers": layers, "live": live}
    assert entry["live"]["status"] == "ok" and entry["live"]["live"]["context_length"] == 131072
    assert SECRET not in json.dumps(got)


def test_a_server_that_cannot_be_read_does_not_stop_the_others(decode_host: HostFiles) -> None:
    def systemctl(argv: list[str]) -> str:
        if "sglang-dsv4-prefill" in argv:
            raise servers_info.ReadError(f"{' '.join(argv)} failed (rc=1): Access denied")
        assert decode_host.run is not None
        return decode_host.run(argv)

    host = HostFiles(root=decode_host.root, run=systemctl)
    prefill = {"role": "prefill", **layout_args("prefill"), "endpoint": "http://127.0.0.1:30000"}
    got = run_module(servers_info, {"servers": [prefill, decode_read()], "name": "lab1"},
                     FixtureTransport(ENGINE, require_key=SECRET), host)  # fmt: skip
    first, second = got["servers"]
    show = "systemctl show -p MainPID -p ActiveState -p UnitFileState sglang-dsv4-prefill"
    assert first == {"role": "prefill", "failed": f"{show} failed (rc=1): Access denied"}, first
    assert second["role"] == "decode" and second["live"]["status"] == "ok" and second["layers"]["problems"] == []


def test_without_the_key_the_engine_refuses_and_the_read_says_so(decode_host: HostFiles, tmp_path: Path) -> None:
    """With the environment file gone, no key is sent: the engine's 401 is an error of that server's live read."""
    (tmp_path / layout_args("decode")["env_file"].lstrip("/")).unlink()
    got = run_module(servers_info, {"servers": [decode_read()], "name": "lab1"},
                     FixtureTransport(ENGINE, require_key=SECRET), decode_host)  # fmt: skip
    [entry] = got["servers"]
    assert entry["layers"]["files"]["env_file"]["exists"] is False
    assert entry["live"]["status"] == "error"
    assert any("unauthorized" in e for e in entry["live"]["errors"]), entry["live"]["errors"]


def test_the_prometheus_query_rides_along_in_the_shape_of_uri(decode_host: HostFiles) -> None:
    query = "/api/v1/query?query=sum%28up%29"
    table = {**ENGINE, query: {"json": {"status": "success", "data": {"result": []}}}}
    args = {"servers": [decode_read()], "name": "lab1", "prometheus_url": f"http://127.0.0.1:9090{query}"}
    got = run_module(servers_info, args, FixtureTransport(table), decode_host)
    assert got["prometheus"] == {"url": f"http://127.0.0.1:9090{query}", "status": 200,
                                 "json": {"status": "success", "data": {"result": []}}}  # fmt: skip
    assert got["servers"][0]["live"]["status"] == "ok"
    without = run_module(servers_info, {"servers": [decode_read()]}, FixtureTransport(ENGINE), decode_host)
    assert without["prometheus"] is None


def test_the_unit_and_the_releases_are_read_as_the_options_name_them(decode_host: HostFiles, tmp_path: Path) -> None:
    # The unit file moved to another folder under another name; five complete releases, r1 the oldest, none linked.
    unit = next((tmp_path / "etc/systemd/system").glob("*.service"))
    moved = tmp_path / "srv/units/dsv4-decode-b.service"
    moved.parent.mkdir(parents=True)
    unit.rename(moved)
    base = tmp_path / "srv/releases"
    for age, name in enumerate(["r1", "r2", "r3", "r4", "r5"]):
        (base / name).mkdir(parents=True)
        (base / name / "manifest.json").write_text("{}")
        os.utime(base / name, (1_700_000_000 + age, 1_700_000_000 + age))
    server = decode_read(unit="dsv4-decode-b", unit_dir="/srv/units", releases_dir="/srv/releases", keep_releases=1)
    got = run_module(servers_info, {"servers": [server], "name": "lab1"}, FixtureTransport(ENGINE, require_key=SECRET),
                     decode_host)  # fmt: skip
    layers = got["servers"][0]["layers"]
    assert layers["unit"]["name"] == "dsv4-decode-b"
    assert (layers["files"]["unit"]["path"], layers["files"]["unit"]["exists"]) == ("/srv/units/dsv4-decode-b.service",
                                                                                     True)  # fmt: skip
    assert layers["releases"] == [f"/srv/releases/r{n}" for n in (1, 2, 3, 4)]  # all but the newest one kept
