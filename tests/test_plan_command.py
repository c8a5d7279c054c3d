"""``manage.py plan``: JSON on stdout; bad input exit 2 with one stderr line. In this
process through ``manage.py``'s own entry point (tests/cli.py), and as a real process where
the process is the point (the worked example, a bad input's exit status)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli import manage as run


def seed() -> dict:
    from tests.core.helpers import seed_scenario
    return seed_scenario()


@pytest.fixture
def seed_file(tmp_path) -> Path:
    p = tmp_path / "seed.json"
    p.write_text(json.dumps(seed()))
    return p


def test_plan_prints_the_worked_example(seed_file):
    r = run("plan", str(seed_file), subprocess=True)
    assert r.returncode == 0, r.stderr
    p = json.loads(r.stdout)
    assert p["order"] == ["A", "B", "C", "F", "D", "E", "G"]
    assert p["dispatch"] == ["A", "B", "C"]
    assert p["clear_s"] == 1800.0


def test_plan_reads_stdin():
    r = run("plan", "-", stdin=json.dumps(seed()))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["order"] == ["A", "B", "C", "F", "D", "E", "G"]


def test_plan_table_shows_time_of_day_and_clear_times(seed_file):
    r = run("plan", "--table", str(seed_file))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    row = next(line for line in lines if line.split()[:2] == ["4", "F"])
    assert "12:10:00" in row and "12:20:00" in row
    assert any(line.startswith("clear-time 12:30:00") for line in lines)


def _bad(tmp_path, scenario, **kw):
    p = tmp_path / "bad.json"
    p.write_text(scenario if isinstance(scenario, str) else json.dumps(scenario))
    return run("plan", str(p), **kw)


def _with(path, value):
    s = seed()
    obj = s
    for k in path[:-1]:
        obj = obj[k]
    obj[path[-1]] = value
    return s


@pytest.mark.parametrize("scenario,expected", [
    (_with(["queued", 3, "org"], "9"), "queued[3].org: unknown org '9'"),
    (_with(["budget"], -1), "budget: must be >= 0, got -1"),
    (_with(["now"], "2026-11-29 12:00"), "now: timestamp without offset '2026-11-29 12:00'"),
    ("{not json", "invalid JSON"),
], ids=["unknown-org", "negative-budget", "no-offset", "invalid-json"])
def test_bad_input_exits_2_with_one_line(tmp_path, scenario, expected):
    r = _bad(tmp_path, scenario, subprocess=expected == "invalid JSON")
    assert r.returncode == 2
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0]
    assert "Traceback" not in r.stderr


def test_missing_file_exits_2():
    r = run("plan", "/nonexistent/scenario.json")
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "no such file" in r.stderr


def test_held_and_paused_orgs_have_no_clear_time_in_json_and_table(tmp_path):
    """Scenario contract v2: null and counted in org_unplanned (was 0.0, "clear")."""
    t = "2026-11-29T11:00:00+00:00"
    s = {"now": "2026-11-29T12:00:00+00:00", "budget": 2,
         "orgs": [{"id": "A", "weight": 1}, {"id": "H", "weight": 0}, {"id": "P", "weight": 1}],
         "queued": [{"id": "a", "org": "A", "workflow": "w", "created_at": t},
                    {"id": "h", "org": "H", "workflow": "w", "created_at": t},
                    {"id": "p", "org": "P", "workflow": "w", "created_at": t, "paused": True}]}
    f = tmp_path / "s.json"
    f.write_text(json.dumps(s))
    p = json.loads(run("plan", str(f)).stdout)
    assert p["org_clear_s"] == {"A": 600.0, "H": None, "P": None}
    assert p["org_unplanned"] == {"H": 1, "P": 1}
    table = run("plan", "--table", str(f)).stdout
    assert "H            no ETA  (1 held, paused or blocked)" in table


def test_a_scenario_with_pools_prints_its_pools_and_a_bad_pool_exits_2(tmp_path):
    example = Path(__file__).resolve().parents[1] / "examples" / "pools_example.json"
    r = run("plan", str(example))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["waiting"]["A2"] == {"reason": "pool", "pool": "gpu"}
    bad = json.loads(example.read_text())
    bad["costs"][0]["pools"] = {"tpu": 1}
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(bad))
    r = run("plan", str(f), subprocess=True)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == ["CommandError: costs[0].pools.tpu: unknown pool 'tpu'"]
