"""``plan --live`` reads the live state in one snapshot of the database.

A live scheduler writes rounds and their cursors while ``plan --live`` reads: the charts
read before such a write and the round state read after it made a restart test's
``plan --live`` rank some charts a round early on a slow machine (PostgreSQL)."""
from __future__ import annotations

import threading

import pytest
from django.db import connection

from control.models import RoundState
from fairsched.engine.store import db
from fairsched.engine import reader
from tests.factories import make_chart, make_org, make_workflow

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_round_state_written_during_the_read_is_not_seen(monkeypatch):
    make_chart(make_org("Acme"), make_workflow("code"))
    RoundState.objects.create(pk=1, head=0, budget=1)
    read_round_state = db.read_round_state
    seen: list[int] = []

    def written_meanwhile():
        """Another connection moves the head after the charts were read, then this one reads it."""
        def write() -> None:
            RoundState.objects.filter(pk=1).update(head=7)
            connection.close()  # this thread's own

        writer = threading.Thread(target=write)
        writer.start()
        writer.join()
        state = read_round_state()
        seen.append(state.head)
        return state

    monkeypatch.setattr(db, "read_round_state", written_meanwhile)
    reader.scenario_from_db()
    assert seen == [0]  # the state as it was when the read began
    assert RoundState.objects.get(pk=1).head == 7  # the write itself went through
