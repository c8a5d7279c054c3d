"""Due states and the warning's hysteresis (scheduling.due)."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from scheduling.due import (AT_RISK, LATE, LEVEL, MET, MISSED, ON_TIME, due_state, finished_state, margin_s,
                                next_level)

times = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)
spans = st.floats(min_value=0, max_value=1e5, allow_nan=False)


def test_the_three_live_states_and_the_slack():
    assert due_state(3600, 1000, 2000) == (ON_TIME, 2600, "")
    assert due_state(3600, 3600, 3600).state == ON_TIME  # at the due time is on time
    assert due_state(3600, 3000, 4000)[:2] == (AT_RISK, 600)
    assert due_state(3600, 4000, 5000)[:2] == (LATE, -400)
    assert due_state(3600, 3000, None).state == ON_TIME  # the lane model: the bound is the ETA


def test_no_eta_is_at_risk_with_its_reason_until_due_then_late():
    assert due_state(10, None, no_eta="paused") == (AT_RISK, None, "paused: no ETA")
    got = due_state(-1, None, no_eta="held")
    assert got.state == LATE and got.slack_s is None and got.reason.startswith("held: no ETA")


def test_finished():
    assert finished_state(100, 100) == MET
    assert finished_state(100, 101) == MISSED
    assert finished_state(100, 50, succeeded=False) == MISSED


@given(due=times, finish=times, extra=spans)
def test_the_state_follows_the_eta_and_the_bound(due, finish, extra):
    bound = finish + extra
    s = due_state(due, finish, bound)
    assert s.slack_s == due - finish
    if finish > due:
        assert s.state == LATE
    elif bound > due:
        assert s.state == AT_RISK
    else:
        assert s.state == ON_TIME
    # a later ETA (same spread) is never a better state
    worse = due_state(due, finish + 1.0, bound + 1.0)
    assert LEVEL[worse.state] >= LEVEL[s.state]


@given(level=st.sampled_from([0, 1, 2]), due=times, finish=times, extra=spans)
def test_the_level_rises_at_once_and_never_below_the_state(level, due, finish, extra):
    raw = LEVEL[due_state(due, finish, finish + extra).state]
    new = next_level(level, due, finish, finish + extra)
    assert raw <= new <= max(level, raw)
    if raw >= level:
        assert new == raw


@given(due=st.floats(min_value=0, max_value=1e6, allow_nan=False), spread=spans,
       wobble=st.lists(st.floats(min_value=-1, max_value=1, allow_nan=False), min_size=2, max_size=60))
def test_an_eta_wandering_less_than_the_margin_warns_once(due, spread, wobble):
    # ETAs around the threshold (the bound crossing the due time), moving by less than the
    # margin: each level is warned of once. (With a spread under the margin the ETA crosses
    # the due time too, so at risk then late are two warnings, never one again.)
    m = margin_s(due)
    level, highest, flaps = 0, 0, 0
    for w in wobble:
        finish = due - spread + 0.49 * m * w
        new = next_level(level, due, finish, finish + spread)
        flaps += new > level and new <= highest  # a warning raised again after it fell
        level, highest = new, max(highest, new)
    assert flaps == 0


@given(due=st.floats(min_value=0, max_value=1e5, allow_nan=False))
def test_a_chart_clearly_back_clears_its_warning(due):
    assert next_level(1, due, due - 10, due + 10) == 1
    assert next_level(1, due, due - 2 * margin_s(due) - 1, due - margin_s(due) - 1) == 0
    assert next_level(2, due, due - margin_s(due) / 2, due + 1) == 2    # back before due but within the margin
    assert next_level(2, due, due - margin_s(due) - 1, due + 1) == 1    # ETA clearly back, bound still after


def test_warning_quality_counts_recall_with_lead_and_precision():
    from scheduling.due import warning_quality
    h = 3600.0
    got = warning_quality([
        (10 * h, True, 5 * h),     # missed, warned 5 h ahead: counts
        (10 * h, True, 9.5 * h),   # missed, warned 30 min ahead: too late for the recall
        (10 * h, True, None),      # missed, never warned
        (10 * h, False, 2 * h),    # warned, met: a false alarm
        (10 * h, False, None),     # met, quiet
    ])
    assert (got["missed"], got["flagged"], got["missed_unwarned"]) == (3, 3, 1)
    assert got["recall"] == 1 / 3 and got["precision"] == 2 / 3 and got["lead_median_s"] == 5 * h
    assert warning_quality([])["recall"] is None
