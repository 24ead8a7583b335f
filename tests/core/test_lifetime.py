"""``with thing:`` starts a StartStop and stops it on the way out, and lets an exception go on."""

import pytest

from labkit.core.lifetime import StartStop


class Recorder(StartStop):
    def __init__(self):
        self.calls = []

    def start(self):
        self.calls.append("start")
        return self

    def stop(self):
        self.calls.append("stop")


def test_the_block_gets_the_started_object_and_it_is_stopped_after():
    r = Recorder()
    with r as inside:
        assert inside is r and r.calls == ["start"]
    assert r.calls == ["start", "stop"]


def test_an_exception_stops_it_and_goes_on():
    r = Recorder()
    with pytest.raises(KeyError, match="boom"):
        with r:
            raise KeyError("boom")
    assert r.calls == ["start", "stop"]
