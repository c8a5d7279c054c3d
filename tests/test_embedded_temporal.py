"""``embedded.start_temporal`` survives a port taken between its choice and the server's bind
(the suite's workers each start a dev server at the same moment): the server that exits is
started again on ports chosen afresh. A real dev server, and a real socket holding the port."""
from __future__ import annotations

import socket

import pytest

from fairsched.runtime import embedded
from tests.conftest import ARTIFACTS

pytestmark = pytest.mark.integration


def test_a_ui_port_taken_before_the_bind_is_chosen_again(monkeypatch):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    real = embedded.free_port
    chosen: list[int] = []

    def free_port(host: str = "127.0.0.1") -> int:  # the second choice (the UI's) is already taken
        port = taken.getsockname()[1] if len(chosen) == 1 else real(host)
        chosen.append(port)
        return port

    monkeypatch.setattr(embedded, "free_port", free_port)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    service = embedded.start_temporal(log=ARTIFACTS / "temporal-port-taken.log")
    try:
        assert len(chosen) == 4, chosen  # two ports, the server exited, two more
        assert service.proc.poll() is None and service.port == chosen[2]
        embedded.wait_for_temporal_health(service.port, timeout=10, proc=service.proc)
    finally:
        service.stop()
        taken.close()


def test_the_ports_a_caller_gives_are_not_changed():
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        with pytest.raises(embedded.EmbeddedError):
            embedded.start_temporal(embedded.free_port(), taken.getsockname()[1],
                                    log=ARTIFACTS / "temporal-port-taken.log")
    finally:
        taken.close()
