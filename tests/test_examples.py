"""The examples the README runs stay valid: the worked example is the contract's own copy,
and both files go through the real commands (through ``manage.py``'s own entry point, in this
process: tests/cli.py; tests/test_plan_command.py and tests/test_simulate_command.py run each
command as a real process too)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli import manage

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
SHARED_SEED = ROOT.parent / "shared" / "scenarios" / "seed_example.json"


@pytest.mark.skipif(not SHARED_SEED.exists(), reason="shared/ is not beside this checkout")
def test_the_shipped_worked_example_is_the_contracts_copy():
    assert json.loads((EXAMPLES / "seed_example.json").read_text()) == json.loads(SHARED_SEED.read_text())


def test_plan_of_the_worked_example():
    result = manage("plan", str(EXAMPLES / "seed_example.json"))
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["order"] == ["A", "B", "C", "F", "D", "E", "G"] and plan["dispatch"] == ["A", "B", "C"]
    assert plan["clear_s"] == 1800.0


def test_the_backlog_trace_shows_wrr_against_fifo():
    by_policy = {}
    for policy in ("wrr", "fifo"):
        result = manage("simulate", str(EXAMPLES / "backlog_trace.json"), "--policy", policy)
        assert result.returncode == 0, result.stderr
        by_policy[policy] = {c["id"]: c for c in json.loads(result.stdout)["charts"]}
    assert by_policy["wrr"]["b1"]["start_s"] == 0.0  # B starts in the first round ...
    assert by_policy["fifo"]["b1"]["start_s"] == 600.0  # ... not after A's 30 charts
    # B is held from 30 s to 240 s: its queued charts wait for the release, then go first.
    assert by_policy["wrr"]["b2"]["start_s"] == 240.0 and by_policy["wrr"]["b3"]["start_s"] == 240.0
