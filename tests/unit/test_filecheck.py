"""plugin_utils/sglang_filecheck: each rendered file checked on the controller by the real program that reads it
(HAProxy 2.6, keepalived 2.2.7, promtool 2.42, amtool, systemd-analyze 252), its refusal in the program's own words
naming the declared variable, and each verdict cached by the digest of its inputs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_filecheck as fc

HAPROXY = """global
    maxconn 4096
defaults
    mode http
    timeout connect 2000ms
    timeout client 1h
    timeout server {timeout}
frontend sglang
    bind *:8080
{extra}    default_backend routers
backend routers
    server r1 127.0.0.1:30000
"""
KEEPALIVED = """vrrp_instance sglang_frontend {{
    state BACKUP
    interface eth0
    virtual_router_id {vrid}
    priority 200
    advert_int 1
    virtual_ipaddress {{
        10.0.0.50/24
    }}
}}
"""
RULES = """groups:
  - name: sglang
    rules:
      - alert: SglangDown
        expr: {expr}
        for: 1m
"""
ALERTMANAGER = """route:
  receiver: {route}
receivers:
  - name: sglang
"""
UNIT = """[Unit]
Description=engine
[Service]
User=sglang
ExecStart=/opt/sglang/bin/serve_dsv4_prefill.sh
ProtectSystem=full
PrivateTmp={private_tmp}
[Install]
WantedBy=multi-user.target
"""
FRONT_DECLARED = {"timeout server": "sglang_frontend_timeout_silent", "server": "the inventory group sglang_router"}


def need(program: str) -> None:
    if fc.version(program) is None:
        pytest.skip(f"{program} is not installed (Debian package {fc.PACKAGES[program]}; make apt)")


def render(root: Path, host: str, files: dict[str, tuple[str, str, dict[str, str]]]) -> Path:
    """files: path on the host -> (content, check command, declared); written as sglang_render_files writes them."""
    base = root / host
    manifest = {}
    for path, (content, check, declared) in files.items():
        target = base / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        manifest[path] = {"check": check, "declared": declared}
    (base / fc.CHECKS_FILE).write_text(json.dumps(manifest))
    return root


def check_one(tmp_path: Path, path: str, content: str, command: str, declared: dict[str, str] | None = None) -> dict:
    root = render(tmp_path / "r", "front-1", {path: (content, command, declared or {})})
    return fc.check_rendered(root, tmp_path / "cache")


def test_haproxy_accepts_a_bare_number_and_refuses_an_unknown_keyword_naming_the_variable(tmp_path: Path) -> None:
    need("haproxy")
    good = check_one(tmp_path, "/etc/haproxy/haproxy.cfg", HAPROXY.format(timeout="3600", extra=""), "haproxy -c -f %s")
    assert good["problems"] == [] and good["ran"] == ["front-1: haproxy -c -f /etc/haproxy/haproxy.cfg: ok"]
    bad = check_one(
        tmp_path,
        "/etc/haproxy/haproxy.cfg",
        HAPROXY.format(timeout="1x", extra="    bogus_directive 1\n"),
        "haproxy -c -f %s",
        FRONT_DECLARED,
    )
    [problem] = bad["problems"]
    assert "unexpected character 'x' in 'timeout server'" in problem
    assert "unknown keyword 'bogus_directive' in 'frontend' section" in problem
    assert problem.startswith("front-1: /etc/haproxy/haproxy.cfg as rendered from sglang_frontend_timeout_silent is")
    assert "the inventory group sglang_router" not in problem  # `server` is not `timeout server`


def test_keepalived_refuses_a_vrid_out_of_range_naming_the_variable(tmp_path: Path) -> None:
    need("keepalived")
    declared = {"virtual_router_id": "sglang_frontend_vip_router_id", "VRID": "sglang_frontend_vip_router_id"}
    good = check_one(tmp_path, "/etc/keepalived/keepalived.conf", KEEPALIVED.format(vrid=51), "keepalived -t -f %s")
    assert good["problems"] == []
    bad = check_one(
        tmp_path, "/etc/keepalived/keepalived.conf", KEEPALIVED.format(vrid=300), "keepalived -t -f %s", declared
    )
    [problem] = bad["problems"]
    assert "VRID '300' not valid - must be between 1 & 255" in problem
    assert "rendered from sglang_frontend_vip_router_id is refused by keepalived" in problem


def test_keepalived_unicast_without_peers_is_refused(tmp_path: Path) -> None:
    """keepalived 2.2.7 -t exits 5 on unicast_src_ip without a peer: the template writes it only with peers."""
    need("keepalived")
    text = KEEPALIVED.format(vrid=51).replace("    advert_int 1\n", "    advert_int 1\n    unicast_src_ip 10.0.0.1\n")
    [problem] = check_one(tmp_path, "/etc/keepalived/keepalived.conf", text, "keepalived -t -f %s")["problems"]
    assert "without any unicast peers" in problem


def test_promtool_refuses_a_bad_promql_rule(tmp_path: Path) -> None:
    need("promtool")
    good = check_one(tmp_path, "/etc/prometheus/r.yml", RULES.format(expr="up == 0"), "promtool check rules %s")
    assert good["problems"] == []
    bad = check_one(tmp_path, "/etc/prometheus/r.yml", RULES.format(expr="rate(up[5m)"), "promtool check rules %s")
    [problem] = bad["problems"]
    assert "promtool check rules FILE" in problem and "parse error" in problem


def test_amtool_refuses_a_route_to_an_undefined_receiver(tmp_path: Path) -> None:
    need("amtool")
    path, command = "/etc/prometheus/alertmanager.yml", "amtool check-config %s"
    assert check_one(tmp_path, path, ALERTMANAGER.format(route="sglang"), command)["problems"] == []
    [problem] = check_one(tmp_path, path, ALERTMANAGER.format(route="pager"), command)["problems"]
    assert 'undefined receiver "pager" used in route' in problem


def test_systemd_refuses_a_sandbox_value_it_would_ignore_and_stubs_the_host_s_executable(tmp_path: Path) -> None:
    need(fc.SYSTEMD)
    path = "/etc/systemd/system/sglang-dsv4-prefill.service"
    declared = {"PrivateTmp": "sglang_common_hardening.PrivateTmp"}
    good = check_one(tmp_path, path, UNIT.format(private_tmp="true"), fc.UNIT_CHECK, declared)
    assert good["problems"] == [], good  # /opt/sglang/bin/... exists only on the host
    [problem] = check_one(tmp_path, path, UNIT.format(private_tmp="maybe"), fc.UNIT_CHECK, declared)["problems"]
    assert f"{path}:7: Failed to parse boolean value, ignoring: maybe" in problem
    assert "rendered from sglang_common_hardening.PrivateTmp" in problem


def test_systemd_refuses_a_soft_limit_above_the_hard_one_naming_the_variable(tmp_path: Path) -> None:
    """systemd 252 says "Soft resource limit chosen higher than hard limit, ignoring" and starts without the limit."""
    need(fc.SYSTEMD)
    path = "/etc/systemd/system/sglang-dsv4-router.service"
    declared = {"LimitMEMLOCK": "sglang_common_limit_memlock"}
    text = UNIT.format(private_tmp="true").replace("[Install]", "LimitMEMLOCK={limit}\n[Install]")
    assert check_one(tmp_path, path, text.format(limit="1M:1G"), fc.UNIT_CHECK, declared)["problems"] == []
    [problem] = check_one(tmp_path, path, text.format(limit="1G:1M"), fc.UNIT_CHECK, declared)["problems"]
    assert "Soft resource limit chosen higher than hard limit, ignoring: 1G:1M" in problem
    assert "rendered from sglang_common_limit_memlock" in problem


def test_an_unchanged_file_is_not_checked_again_and_a_changed_one_is(tmp_path: Path) -> None:
    need("haproxy")
    root = render(
        tmp_path / "r",
        "f",
        {"/etc/haproxy/haproxy.cfg": (HAPROXY.format(timeout="1h", extra=""), "haproxy -c -f %s", {})},
    )
    first = fc.check_rendered(root, tmp_path / "cache")
    again = fc.check_rendered(root, tmp_path / "cache")
    assert (first["stats"]["cached"], again["stats"]["cached"]) == (0, 1)
    assert again["ran"] == ["f: haproxy -c -f /etc/haproxy/haproxy.cfg: ok (cached verdict)"]
    (root / "f/etc/haproxy/haproxy.cfg").write_text(HAPROXY.format(timeout="2h", extra=""))
    assert fc.check_rendered(root, tmp_path / "cache")["stats"]["cached"] == 0


def test_a_checker_missing_on_the_controller_is_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda *_a, **_k: None)
    result = check_one(tmp_path, "/etc/haproxy/haproxy.cfg", "garbage", "haproxy -c -f %s")
    assert result["problems"] == [] and result["ran"] == []
    assert result["missing"] == [
        "haproxy is not on the controller (Debian package haproxy; fix: `make apt`): 1 rendered file(s) left to the "
        "check on their host during the deploy"
    ]
