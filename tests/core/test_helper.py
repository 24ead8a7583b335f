"""A helper that cannot start (``labkit.core.helper``): the reason names it and its exit code, its
folder goes, and its slot does not try again until it is stopped."""

from pathlib import Path

import pytest

from labkit.core.helper import Helper, Slot


class Quits(Helper):
    """A helper whose module exits at once, before its socket appears."""

    NAME = "quitting helper"
    PREFIX = "labkit-test-helper-"
    MODULE = "labkit.core.helper"  # imports, runs nothing, exits 0
    starts = 0

    def prepare(self) -> None:
        type(self).starts += 1
        (self.dir / "made-by-prepare").write_text("x")
        type(self).folders.append(self.dir)


def test_a_helper_that_quits_is_named_its_folder_removed_and_not_tried_again(monkeypatch):
    monkeypatch.setattr(Quits, "folders", [], raising=False)
    monkeypatch.setattr(Quits, "starts", 0)
    with pytest.raises(RuntimeError, match=r"the quitting helper ended during its start-up \(exit code 0\)"):
        Quits(timeout=30)
    slot = Slot(Quits, restart=False)
    assert slot.get() is None and "quitting helper ended during its start-up" in slot.failed
    assert slot.get() is None and Quits.starts == 2  # the failure is kept: no third start
    assert all(not Path(d).exists() for d in Quits.folders)
    slot.stop()
    assert slot.failed is None and slot.get() is None and Quits.starts == 3  # stopped: tried again
