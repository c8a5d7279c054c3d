"""The scheduler's external ids held as bytes in blocks (fairsched/engine/store/external_ids.py):
a dict's behaviour, a fraction of a dict's memory."""
from __future__ import annotations

import sys

import pytest
from hypothesis import given, settings, strategies as st

from fairsched.engine.store.external_ids import BLOCK, MAX_BYTES, ExternalIds

ids = st.integers(min_value=0, max_value=5 * BLOCK)  # a few blocks, so that blocks empty and fill again
externals = st.one_of(st.none(), st.text(max_size=12), st.sampled_from(["mrn-1", "mrn-2", "é-ü-✓"]))
ops = st.lists(st.tuples(st.sampled_from(["set", "pop", "del", "get"]), ids, externals), max_size=300)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_it_behaves_as_a_dict(steps):
    got, model = ExternalIds(), {}
    for op, cid, ext in steps:
        if op == "set":
            got[cid] = model[cid] = ext
        elif op == "pop":
            assert got.pop(cid, "absent") == model.pop(cid, "absent")
        elif op == "del":
            if cid in model:
                del got[cid], model[cid]
            else:
                with pytest.raises(KeyError):
                    del got[cid]
        assert got.get(cid, "absent") == model.get(cid, "absent")
        assert (cid in got) == (cid in model)
    assert len(got) == len(model)
    assert sorted(got) == sorted(model)
    assert got == model and dict(got.items()) == model
    twin = got.copy()
    assert twin == model
    for cid in list(model):  # the copy is its own
        twin.pop(cid)
    assert got == model and len(twin) == 0


def test_a_missing_id_reads_as_in_a_dict():
    got = ExternalIds({7: None, 8: "x"})
    assert got[7] is None and 7 in got and got.get(7, "absent") is None
    assert got.get(9) is None and got.get(9, "absent") == "absent" and 9 not in got
    with pytest.raises(KeyError):
        got[9]
    with pytest.raises(KeyError):
        got.pop(9)
    assert "8" not in got  # a string is no chart id here


def test_an_id_set_again_and_again_keeps_its_block_small():
    """A resync sets every chart's external id again, and a chart's may change: the bytes
    no chart holds any more are dropped once they are half of the block's."""
    got = ExternalIds()
    for k in range(10_000):
        got[3] = f"mrn-{k:06d}"
        got[4] = "same"
    block = got._blocks[0]
    assert got[3] == "mrn-009999" and got[4] == "same"
    assert len(block.blob) <= 2 * (10 + 4) + 256 + 10


def test_a_block_is_dropped_with_its_last_chart():
    got = ExternalIds({i: f"e{i}" for i in range(BLOCK, 2 * BLOCK)})
    assert got.block_count == 1
    for i in range(BLOCK, 2 * BLOCK):
        got.pop(i)
    assert got.block_count == 0 and len(got) == 0


def test_bad_input_is_refused_naming_the_field():
    got = ExternalIds()
    with pytest.raises(ValueError, match="external_id"):
        got[1] = "x" * (MAX_BYTES + 1)
    with pytest.raises(TypeError, match="chart id"):
        got["1"] = "x"
    with pytest.raises(TypeError, match="external_id"):
        got[1] = 17
    assert len(got) == 0 and 1 not in got


def _footprint(d) -> int:
    if isinstance(d, ExternalIds):
        return d.nbytes()
    return sys.getsizeof(d) + sum(sys.getsizeof(v) for v in d.values())


def test_dense_ids_take_a_fraction_of_a_dict_of_strings():
    """Chart ids are the database's, given in order: 100k of them with ids like the
    producers' take some 20 bytes a chart, against some 100 in a dict of strings."""
    n = 100_000
    model = {cid: f"mrn-{cid:07d}" for cid in range(10_000, 10_000 + n)}
    got = ExternalIds(model)
    assert got == model
    per_chart, dict_per_chart = _footprint(got) / n, _footprint(model) / n
    assert per_chart < 25, per_chart
    assert dict_per_chart > 4 * per_chart, (dict_per_chart, per_chart)
