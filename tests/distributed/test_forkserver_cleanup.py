"""What a fork server leaves in /tmp: nothing, once it is stopped, or once it died and the next
launcher's ``get`` replaced it."""

import os
import signal
import sys

import pytest

from labkit.core.helper import Slot
from labkit.distributed.launchers import forkserver

pytestmark = [
    pytest.mark.tensorflow,  # the server imports TensorFlow before it forks
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork server is Linux only"),
]


def test_a_stopped_server_removes_its_folder():
    server = forkserver.ForkServer()
    assert server.running and (server.dir / "socket").exists() and (server.dir / "python").exists()
    server.stop()
    assert not server.running and not server.dir.exists()


def test_a_server_that_died_is_replaced_and_its_folder_removed(monkeypatch):
    monkeypatch.delenv(forkserver.DISABLE, raising=False)
    monkeypatch.setattr(forkserver, "_slot", Slot(forkserver.ForkServer, restart=True))
    first = forkserver.get()
    try:
        os.kill(first.process.popen.pid, signal.SIGKILL)
        first.process.popen.wait(timeout=30)
        second = forkserver.get()
        assert second is not first and second.running
        assert not first.dir.exists() and second.dir.exists()
    finally:
        forkserver.get().stop()
    assert not forkserver._slot.helper.dir.exists()
