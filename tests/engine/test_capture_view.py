"""``LiveState.capture(copy=False)``, what a forked child's ETA pass and a preview read: the
state's own structures, not copies. An ETA pass over it gives what a pass over the copy
gives (the ETAs, the due states, the snapshot and its order rows), and it changes nothing in
the state."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from fairsched.engine.due_states import due_pass
from fairsched.engine.publish import build_snapshot
from tests.engine.test_whatif import T, charts_st, state_of


def a_pass(captured, now):
    report = captured.eta_report(now)
    p90 = captured.forecast.p90_finisher()
    due = due_pass(captured, report.etas, now, p90)
    snap, rows, per_org = build_snapshot(captured, report, now, p90=p90, due=due)
    snap.pop("generated_at", None)
    return report.etas, report.org_clear_s, due.by_chart, due.levels, snap, list(rows), per_org


@settings(max_examples=40, deadline=None)
@given(charts_st, st.sampled_from(["lanes", "forecast"]), st.integers(0, 3), st.sampled_from([0.0, 3600.0]))
def test_a_pass_over_the_state_itself_gives_what_a_pass_over_its_copy_gives(spec, model, dispatch, shift):
    state = state_of(spec, model=model, dispatch=dispatch)
    state.external_ids.update({i: f"mrn-{i}" for i in state.external_ids})  # shown in the rows and the Due list
    order, rounds = list(state.queue), state.queue.export_rounds()
    due_book = (dict(state.due.explicit), dict(state.due.alerts))

    own = a_pass(state.capture(copy=False), T + shift)
    copied = a_pass(state.capture(), T + shift)

    assert own == copied
    assert list(state.queue) == order and state.queue.export_rounds() == rounds
    assert (state.due.explicit, state.due.alerts) == due_book  # read, never written
    shared, copied_in = state.capture(copy=False).due, state.capture().due
    assert shared.alerts is state.due.alerts and shared.explicit is state.due.explicit
    assert copied_in.alerts is not state.due.alerts and copied_in.explicit is not state.due.explicit
