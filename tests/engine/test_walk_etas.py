"""A full forecast pass's ETAs as columns along the order's walk (scheduling.WalkEtas):
read by place they are the ETAs read by id, and every reader that walks the order by place
(the due states, the previews' counts, the snapshot's rows, the first ETAs) gives what it
gives from the same ETAs in a plain dict. Charts whose cost is above the budget have none."""
from __future__ import annotations

from array import array

from hypothesis import given, settings, strategies as st

from scheduling import Eta, EtaReport, WalkEtas
from fairsched.engine import whatif
from fairsched.engine.due_states import due_pass
from fairsched.engine.eta_passes import EtaColumns
from fairsched.engine.publish import build_snapshot
from tests.engine.test_whatif import T, charts_st, state_of


def columns(c: EtaColumns) -> set:
    return set(zip(c.ids, c.start, c.finish))


@settings(max_examples=60, deadline=None)
@given(charts_st, st.integers(1, 4), st.integers(0, 2), st.booleans())
def test_the_walks_etas_read_by_place_are_the_etas_read_by_id(spec, budget, dispatch, bounds):
    cap = state_of(spec, budget=budget, model="forecast", dispatch=dispatch).capture()
    report = cap.eta_report(T)
    walked = report.etas
    assert isinstance(walked, WalkEtas)
    order = list(cap.queue)
    p90 = cap.forecast.p90_finisher() if bounds else None
    some = set(order[::2]) | {str(r.id) for r in cap.running}
    # the readers, by place
    due = due_pass(cap, walked, T, p90)
    risky = whatif.at_risk_counts(cap, walked, T, p90)
    snap, rows, per_org = build_snapshot(cap, report, T, p90=p90, due=due)
    first = EtaColumns.of(walked, some)
    assert not walked.indexed  # none of them looked a chart up by id (an index of every chart)

    plain = dict(walked.items())
    assert len(walked) == len(plain) and list(walked) == list(plain)
    for pos, cid in enumerate(order):
        assert walked.at(pos, cid) == plain.get(cid)
        assert (cid in walked) == (cid in plain)
    as_dict = EtaReport(plain, report.org_clear_s, report.clear_s, report.org_unplanned)
    assert due == due_pass(cap, plain, T, p90)
    assert risky == whatif.at_risk_counts(cap, plain, T, p90)
    snap2, rows2, per_org2 = build_snapshot(cap, as_dict, T, p90=p90, due=due)
    assert snap == snap2 and list(rows) == list(rows2)
    assert {o: list(v["charts"]) for o, v in per_org.items()} == {o: list(v["charts"]) for o, v in per_org2.items()}
    assert columns(first) == columns(EtaColumns.of(plain, some))

def test_a_chart_without_an_eta_is_not_in_the_mapping_yet_keeps_its_place():
    nan = float("nan")
    ids = ["5", "6", "7"]
    w = WalkEtas({"1": Eta(0.0, 60.0)}, ids, array("d", [0.0, nan, 30.0]), array("d", [90.0, nan, 120.0]))
    assert dict(w) == {"1": Eta(0.0, 60.0), "5": Eta(0.0, 90.0), "7": Eta(30.0, 120.0)}
    assert list(w) == ["1", "5", "7"] and len(w) == 3
    assert w.at(1, ids[1]) is None and "6" not in w and w.get("6") is None
    assert w.at(2, ids[2]) == Eta(30.0, 120.0)
    assert w.at(0, "7") == Eta(30.0, 120.0)  # not the id at that place: read by id
    assert w.at(9, "1") == Eta(0.0, 60.0)
    assert w == {"1": Eta(0.0, 60.0), "5": Eta(0.0, 90.0), "7": Eta(30.0, 120.0)}


def test_the_first_etas_taken_from_a_walk_are_those_of_the_ids_asked_that_have_one():
    nan = float("nan")
    w = WalkEtas({"1": Eta(0.0, 60.0), "2": Eta(5.0, 65.0)}, ["5", "6", "7", "8"],
                 array("d", [0.0, nan, 30.0, 40.0]), array("d", [90.0, nan, 120.0, 130.0]))
    first = EtaColumns.of(w, {"1", "5", "6", "8", "9"})  # 6 has no ETA, 9 is not in the walk
    assert (list(first.ids), list(first.start), list(first.finish)) == ([1, 5, 8], [0.0, 0.0, 40.0],
                                                                        [60.0, 90.0, 130.0])
    assert first.part(0, 3) == {"1": Eta(0.0, 60.0), "5": Eta(0.0, 90.0), "8": Eta(40.0, 130.0)}
