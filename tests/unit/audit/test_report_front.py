"""The audit's judgement of the HAProxy front: each declared router in or out of each front host, from what
sglang_frontend_info read there (HAProxy's `show stat` statuses), and its weight in the summary."""

from __future__ import annotations

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_haproxy import parse_stat
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_plan import Fleet
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_report import Report, build, front_lines, render_text

# `show stat` as HAProxy 2.6 answers it (the first columns and those the reader uses, in HAProxy's order).
SHOW_STAT = """# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,status,
sglang,FRONTEND,,,3,9,4096,120,0,0,0,0,0,,,,,OPEN,
sglang_routers,r1,0,0,2,5,,60,0,0,,0,,0,0,0,0,UP,
sglang_routers,r2,0,0,1,4,,60,0,0,,0,,0,0,0,0,DRAIN,
sglang_routers,old,0,0,0,0,,0,0,0,,0,,0,0,0,0,DOWN,
sglang_routers,BACKEND,0,0,3,9,410,120,0,0,0,0,,0,0,0,0,UP,
stats,FRONTEND,,,1,1,4096,7,0,0,0,0,0,,,,,OPEN,
"""


def servers() -> list[dict[str, object]]:
    return [
        {"server": s.server, "status": s.status, "sessions": s.sessions}
        for (backend, _), s in parse_stat(SHOW_STAT).items()
        if backend == "sglang_routers"
    ]


def test_show_stat_is_read_per_server_without_the_frontend_and_backend_rows() -> None:
    assert servers() == [
        {"server": "r1", "status": "UP", "sessions": 2},
        {"server": "r2", "status": "DRAIN", "sessions": 1},
        {"server": "old", "status": "DOWN", "sessions": 0},
    ]


def report(fronts: dict[str, dict[str, object]], fail_on_drift: bool = True) -> Report:
    declared = Fleet({}, {"sglang_router": ["r1", "r2", "r3"]})
    return build([], fail_on_drift, declared, fronts=fronts)


def test_a_drained_a_missing_and_an_undeclared_router_each_count_and_fail_the_audit() -> None:
    built = report({"f1": {"servers": servers()}, "f2": {"unreachable": True, "msg": "ssh: no route to host"}})
    assert front_lines(built.fronts) == [
        "f1: r1 in (UP, 2 open), r2 OUT (DRAIN, 1 open), r3 MISSING, old UNDECLARED (DOWN, 0 open)",
        "f2: not read (ssh: no route to host)",
    ]
    assert built.summary["front_out"] == 4 and built.summary["failed"]
    assert built.as_dict()["fronts"]["f2"] == {"error": "ssh: no route to host"}
    text = render_text(built)
    assert "front (HAProxy, group sglang_frontend):\n  f1: r1 in (UP, 2 open)," in text
    assert text.rstrip().splitlines()[-2].endswith(", 4 router(s) out of a front")
    assert not report({"f1": {"servers": servers()}}, fail_on_drift=False).summary["failed"]


def test_every_router_up_in_every_front_passes() -> None:
    up = [{"server": r, "status": "UP", "sessions": 0} for r in ("r1", "r2", "r3")]
    built = report({"f1": {"servers": up}, "f2": {"servers": up[::-1]}})
    assert front_lines(built.fronts) == [
        f"{f}: r1 in (UP, 0 open), r2 in (UP, 0 open), r3 in (UP, 0 open)" for f in ("f1", "f2")
    ]
    assert built.summary["front_out"] == 0 and not built.summary["failed"]


def test_without_a_front_the_report_says_nothing_of_one() -> None:
    built = report({})
    assert built.fronts == {} and "front" not in render_text(built)
    assert "front_out" not in built.summary and "fronts" not in built.as_dict()


def test_a_front_that_could_not_be_read_is_said_and_the_next_front_still_listed() -> None:
    fronts = {
        "f1": {"error": "no such file /run/haproxy/admin.sock"},
        "f2": {"rows": [{"router": "r1", "state": "in", "status": "UP", "sessions": 2},
                        {"router": "r2", "state": "drain", "status": None, "sessions": 0}]},
    }  # fmt: skip
    assert front_lines(fronts) == [
        "f1: not read (no such file /run/haproxy/admin.sock)",
        "f2: r1 in (UP, 2 open), r2 DRAIN",
    ]
