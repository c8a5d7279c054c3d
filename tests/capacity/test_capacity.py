"""The capacity check's comparison (pure) and the worker's advertisement in Redis."""
from __future__ import annotations

import asyncio
import json

import pytest

from fairsched.temporal import capacity
from fairsched.temporal.capacity import DEFAULT_SLOTS, Advert, Poller, merge_pollers, queue_capacity, summarise
from fairsched.temporal.advertise import ADVERT_TTL_S, Advertiser, advert_index, advert_key

NOW = 1_000_000.0
Q = "fairsched"


def ours(n: int) -> str:
    return f"host-{n}:{100 + n}:fairsched"


def adverts(*pairs: tuple[str, int], at: float = NOW - 5) -> dict[str, Advert]:
    return {i: Advert(i, slots, at) for i, slots in pairs}


def test_no_warning_when_the_slots_cover_the_running_charts():
    pollers = [Poller(ours(1), NOW - 3), Poller(ours(2), NOW - 40)]
    q = queue_capacity(Q, pollers, adverts((ours(1), 100), (ours(2), 100)), 200, now=NOW, default_queue=Q)
    assert (q["slots"], q["short"], q["warning"]) == (200, 0, None)
    assert [w["advertised"] for w in q["workers"]] == [True, True]


def test_warning_names_the_running_the_workers_their_slots_and_the_excess():
    pollers = [Poller(ours(1), NOW - 3), Poller(ours(2), NOW - 3)]
    q = queue_capacity(Q, pollers, adverts((ours(1), 100), (ours(2), 100)), 240, now=NOW, default_queue=Q)
    assert q["short"] == 40
    assert q["warning"] == (
        "Running 240 charts but the 2 live workers have 200 activity slots: 40 charts wait for a slot "
        "while holding budget. Start more workers or raise FAIRSCHED_WORKER_CONCURRENCY (see README, "
        "Sizing workers).")


def test_singular_and_another_task_queue_is_named():
    q = queue_capacity("gpu", [Poller(ours(1), NOW)], adverts((ours(1), 2)), 3, now=NOW, default_queue=Q)
    assert q["warning"].startswith(
        "Task queue 'gpu': Running 3 charts but the 1 live worker has 2 activity slots: 1 chart waits for a slot")


def test_a_poller_without_advertisement_counts_as_the_temporalio_default_and_the_warning_says_so():
    pollers = [Poller("12345@their-box", NOW - 1)]
    q = queue_capacity(Q, pollers, {}, 150, now=NOW, default_queue=Q)
    assert q["slots"] == DEFAULT_SLOTS == 100
    assert q["unadvertised"] == 1 and q["short"] == 50
    assert "(1 worker does not advertise its slots: counted as temporalio's default of 100 each)" in q["warning"]
    assert queue_capacity(Q, pollers, {}, 100, now=NOW)["warning"] is None


def test_a_live_advertisement_counts_whether_or_not_its_worker_polls():
    """A worker whose slots are all busy stops polling for activities (after 5 minutes Temporal
    drops it from the pollers) while every slot of it runs a chart: its live advertisement
    counts. Only an advertisement that is no longer refreshed stops counting."""
    pollers = [Poller(ours(1), NOW - 2), Poller(ours(2), NOW - capacity.POLLER_FRESH_S - 1)]
    ads = {**adverts((ours(1), 5), (ours(2), 1000), (ours(3), 1000)), **adverts((ours(4), 7), at=NOW - ADVERT_TTL_S - 1)}
    q = queue_capacity(Q, pollers, ads, 2010, now=NOW, default_queue=Q)
    assert [(w["identity"], w["slots"], w["seen_s"]) for w in q["workers"]] == [
        (ours(1), 5, 2.0), (ours(2), 1000, None), (ours(3), 1000, None)]
    assert (q["slots"], q["short"]) == (2005, 5)
    assert q["warning"].startswith("Running 2010 charts but the 3 live workers have 2005 activity slots")


def test_a_worker_with_every_slot_busy_is_no_false_alarm():
    """The issue's case: 2 charts run on the one worker's 2 slots; Temporal lists no
    activity poller any more. No warning, and no "no live worker polls"."""
    q = queue_capacity(Q, [], adverts((ours(1), 2)), 2, now=NOW, default_queue=Q)
    assert (q["slots"], q["short"], q["warning"]) == (2, 0, None)
    assert q["workers"] == [{"identity": ours(1), "slots": 2, "advertised": True, "seen_s": None}]


def test_a_stale_advertisement_is_ignored():
    """Older than its TTL (the worker stopped refreshing it): our worker counts as stopped."""
    pollers = [Poller(ours(1), NOW - 2)]
    q = queue_capacity(Q, pollers, adverts((ours(1), 1000), at=NOW - ADVERT_TTL_S - 1), 3, now=NOW, default_queue=Q)
    assert q["slots"] == 0 and q["workers"] == [] and q["stopped"] == [ours(1)]
    assert q["warning"].startswith("Running 3 charts but no live worker polls task queue 'fairsched': 3 charts wait")


def test_a_fairsched_poller_without_advertisement_has_stopped():
    """A warm stop removes the advertisement; Temporal still lists the poller for a while."""
    q = queue_capacity(Q, [Poller(ours(1), NOW - 1)], {}, 0, now=NOW)
    assert q["slots"] == 0 and q["stopped"] == [ours(1)] and q["warning"] is None


def test_a_busy_worker_polls_only_for_workflow_tasks_and_stays_live():
    activity = [Poller(ours(1), NOW - 600), Poller(ours(2), None)]
    workflow = [Poller(ours(1), NOW - 4), Poller("someone-else", NOW)]
    merged = merge_pollers(activity, workflow)
    assert merged == [Poller(ours(1), NOW - 4), Poller(ours(2), None)]
    q = queue_capacity(Q, merged, adverts((ours(1), 2), (ours(2), 2)), 4, now=NOW)
    assert [(w["identity"], w["seen_s"]) for w in q["workers"]] == [(ours(1), 4.0), (ours(2), None)]
    assert q["slots"] == 4 and q["warning"] is None  # ours(2) polls not at all: its advertisement counts


def test_no_running_and_no_workers_is_no_warning():
    assert queue_capacity(Q, [], {}, 0, now=NOW)["warning"] is None


def test_summary_adds_the_queues_up():
    a = queue_capacity(Q, [Poller(ours(1), NOW)], adverts((ours(1), 2)), 3, now=NOW, default_queue=Q)
    b = queue_capacity("gpu", [], {}, 1, now=NOW, default_queue=Q)
    s = summarise([a, b], now=NOW)
    assert (s["known"], s["running"], s["slots"], s["workers"], s["short"]) == (True, 4, 2, 1, 2)
    assert s["warning"] == a["warning"] + " " + b["warning"]
    json.dumps(s)


# --- the whole check, Temporal unreachable --------------------------------------------------------


@pytest.mark.django_db
def test_temporal_unreachable_is_unknown_not_an_error(monkeypatch):
    monkeypatch.setattr(capacity, "TEMPORAL_TIMEOUT_S", 2.0)
    result = capacity.check(address="127.0.0.1:9", namespace="default", default_queue=Q, r=None)
    assert result["known"] is False and result["warning"] is None
    assert result["note"] == "Worker capacity unknown: Temporal did not answer."


@pytest.mark.django_db
def test_read_without_redis_or_without_a_check_is_unknown(settings):
    settings.REDIS_URL = "redis://127.0.0.1:9/0"
    got = capacity.read()
    assert got["known"] is False and got["warning"] is None and "Redis" in got["note"]


def test_read_returns_the_stored_check(redis_url):
    from common.notify import redis_client

    stored = summarise([queue_capacity(Q, [], {}, 3, now=NOW)], now=NOW)
    redis_client().set(capacity.RESULT_KEY, json.dumps(stored))
    got = capacity.read()
    assert got["known"] is True and got["short"] == 3 and got["warning"] == stored["warning"]
    redis_client().delete(capacity.RESULT_KEY)
    assert "not checked in the last minute" in capacity.read()["note"]


@pytest.mark.django_db
def test_check_counts_an_advertised_worker_temporal_no_longer_lists(redis_url, monkeypatch):
    """The whole check with a real Redis and Temporal answering with no poller at all (as it
    does 5 minutes into a busy worker's last activity poll): the advertisement, found through
    the task queue's index, counts; an index name whose key expired (a killed worker) is
    pruned and counts for nothing."""
    import redis

    from tests.factories import make_chart, make_org, make_workflow

    r = redis.Redis.from_url(redis_url)
    org, wf = make_org("Acme"), make_workflow("code", temporal_type="DemoChart")
    for i in range(2):
        make_chart(org, wf, state="running", dispatched_cost=1, external_id=f"r-{i}")
    assert Advertiser(redis_url=redis_url, task_queue=Q, identity=ours(1), slots=2).write()
    r.zadd(advert_index(Q), {ours(9): NOW})  # a worker killed long ago: its key has expired

    async def no_client(address, namespace):
        return None

    async def no_pollers(client, namespace, task_queue):
        return []

    monkeypatch.setattr(capacity, "_connect", no_client)
    monkeypatch.setattr(capacity, "describe_pollers", no_pollers)
    result = capacity.check(address="unused", namespace="default", default_queue=Q, r=r)
    assert (result["running"], result["workers"], result["slots"], result["short"], result["warning"]) == (
        2, 1, 2, 0, None)
    assert result["queues"][0]["workers"][0]["identity"] == ours(1)
    assert r.zrange(advert_index(Q), 0, -1) == [ours(1).encode()]


# --- the advertisement ---------------------------------------------------------------------------


def test_advertiser_writes_with_a_ttl_refreshes_and_removes_on_stop(redis_url):
    import redis

    r = redis.Redis.from_url(redis_url)
    ad = Advertiser(redis_url=redis_url, task_queue=Q, identity=ours(1), slots=7, refresh_s=0.05)
    key = advert_key(Q, ours(1))
    assert key == "fairsched:worker:fairsched:host-1:101:fairsched"

    async def go() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(ad.run(stop))
        for _ in range(100):
            if r.exists(key):
                break
            await asyncio.sleep(0.02)
        data = json.loads(r.get(key))
        assert data["slots"] == 7 and data["identity"] == ours(1) and data["task_queue"] == Q
        assert 0 < r.ttl(key) <= ADVERT_TTL_S
        assert r.zrange(advert_index(Q), 0, -1) == [ours(1).encode()]  # the queue's index names it
        assert 0 < r.ttl(advert_index(Q)) <= ADVERT_TTL_S
        first = data["at"]
        await asyncio.sleep(0.2)
        assert json.loads(r.get(key))["at"] > first  # refreshed
        stop.set()
        await asyncio.wait_for(task, 5)

    asyncio.run(go())
    assert not r.exists(key)  # a warm stop removes it
    assert r.zrange(advert_index(Q), 0, -1) == []


def test_advertiser_survives_a_redis_outage(caplog):
    ad = Advertiser(redis_url="redis://127.0.0.1:9/0", task_queue=Q, identity=ours(1), slots=7, refresh_s=0.05)

    async def go() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(ad.run(stop))
        await asyncio.sleep(0.3)
        assert not task.done()
        stop.set()
        await asyncio.wait_for(task, 10)

    asyncio.run(go())
    assert "could not advertise this worker's 7 activity slots" in caplog.text
