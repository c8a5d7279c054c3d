"""``manage.py simulate``, in this process through ``manage.py``'s own entry point
(tests/cli.py), and as a real process for one run and one bad input."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli import manage as run


HEADLINE = {
    "budget": 3, "orgs": [{"id": "A", "weight": 1}, {"id": "B", "weight": 1}],
    "arrivals": [{"id": f"a{i}", "org": "A", "workflow": "w", "at_s": 0, "actual_s": 60}
                 for i in range(1000)]
    + [{"id": f"b{i}", "org": "B", "workflow": "w", "at_s": 0, "actual_s": 60} for i in range(100)],
}


@pytest.fixture
def trace_file(tmp_path) -> Path:
    p = tmp_path / "trace.json"
    p.write_text(json.dumps(HEADLINE))
    return p


@pytest.mark.parametrize("policy,first_b", [("wrr", 0.0), ("fifo", 333 * 60.0),
                                            ("proportional", 167 * 60.0)],
                         ids=["wrr", "fifo", "proportional"])
def test_simulate_headline(trace_file, policy, first_b):
    r = run("simulate", str(trace_file), "--policy", policy, subprocess=policy == "wrr")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["policy"] == policy
    assert len(out["charts"]) == 1100
    assert min(c["start_s"] for c in out["charts"] if c["org"] == "B") == first_b


def test_simulate_summary_table(trace_file):
    r = run("simulate", str(trace_file), "--policy", "fifo", "--summary")
    assert r.returncode == 0, r.stderr
    row = next(line for line in r.stdout.splitlines() if line.startswith("B "))
    assert row.split()[1:4] == ["100", "100", "19980"]


def test_unknown_policy_exits_2_with_one_line(trace_file):
    r = run("simulate", str(trace_file), "--policy", "lottery")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "policy: unknown policy 'lottery'" in lines[0]


def test_bad_trace_exits_2(tmp_path):
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"budget": 1, "orgs": [{"id": "A", "weight": 1}],
                             "arrivals": [{"id": "x", "org": "Z", "workflow": None,
                                           "at_s": 0, "actual_s": 1}]}))
    r = run("simulate", str(p), subprocess=True)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == ["CommandError: arrivals[0].org: unknown org 'Z'"]


def test_eta_model_forecast_and_a_bad_one_exits_2(tmp_path):
    trace = {"budget": 1, "orgs": [{"id": "A", "weight": 1}, {"id": "B", "weight": 1}], "eta_model": "forecast",
             "arrivals": [{"id": f"a{i}", "org": "A", "workflow": "w", "at_s": 0, "actual_s": 60} for i in range(5)]
             + [{"id": f"b{i}", "org": "B", "workflow": "w", "at_s": 60 * i, "actual_s": 60} for i in range(5)]}
    p = tmp_path / "t.json"
    p.write_text(json.dumps(trace))
    r = run("simulate", str(p))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["eta_model"] == "forecast"
    # B keeps arriving: the forecast for a chart of A at the back sees B's next charts coming
    trace["eta_model"] = "lanes"
    p.write_text(json.dumps(trace))
    out_lanes = json.loads(run("simulate", str(p)).stdout)
    eta = {c["id"]: c["eta_at_arrival_s"] for c in out["charts"]}
    eta_lanes = {c["id"]: c["eta_at_arrival_s"] for c in out_lanes["charts"]}
    assert eta["a4"] > eta_lanes["a4"]
    summary = run("simulate", str(p), "--summary")
    assert summary.returncode == 0 and "ETA at arrival (lanes): mean absolute error" in summary.stdout
    trace["eta_model"] = "crystal-ball"
    p.write_text(json.dumps(trace))
    r = run("simulate", str(p))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "eta_model: unknown ETA model 'crystal-ball'" in lines[0]


@pytest.mark.parametrize("field,value,line", [
    ("share", "bytes", "share: unknown share 'bytes' (expected one of charts, work)"),
    ("dispatch", "eager", "dispatch: unknown dispatch 'eager' (expected one of strict, backfill)"),
    ("quantum_s", 0, "quantum_s: must be > 0, got 0"),
])
def test_a_bad_policy_exits_2_naming_the_field(tmp_path, field, value, line):
    """``plan`` and ``simulate`` refuse a bad ``share``, ``dispatch`` or ``quantum_s``."""
    t = tmp_path / "t.json"
    t.write_text(json.dumps({**HEADLINE, field: value}))
    r = run("simulate", str(t))
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1].endswith(line)
    s = tmp_path / "s.json"
    s.write_text(json.dumps({**json.loads((Path(__file__).parent.parent / "examples" / "seed_example.json")
                                          .read_text()), field: value}))
    r = run("plan", str(s))
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1].endswith(line)


def test_the_policies_summary(trace_file, tmp_path):
    t = tmp_path / "t.json"
    t.write_text(json.dumps({**HEADLINE, "share": "work", "dispatch": "backfill"}))
    r = run("simulate", str(t), "--summary")
    assert r.returncode == 0, r.stderr
    assert "share work (quantum 600 s), dispatch backfill: budget use while charts wait 100.0%" in r.stdout
    assert "wait p50 s" in r.stdout
