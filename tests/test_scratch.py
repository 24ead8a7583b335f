"""Scratch folders a killed process left in /tmp are removed by the next maker of their kind
(``labkit.core.scratch``), and a live owner's never are, whatever pid namespace it runs in."""

import os
import signal
import subprocess
import sys

from labkit.core import scratch

MAKE = (
    "import sys, time; from labkit.core import scratch; print(scratch.make(sys.argv[1]), flush=True); time.sleep(600)"
)


def test_a_killed_owners_folder_goes_and_a_live_ones_stays():
    prefix = f"labkit-test-scratch-{os.getpid()}-"
    mine = None
    owner = subprocess.Popen([sys.executable, "-c", MAKE, prefix], stdout=subprocess.PIPE, text=True)
    try:
        theirs = owner.stdout.readline().strip()
        mine = scratch.make(prefix)
        assert os.path.isdir(theirs) and theirs != str(mine)
        assert scratch.remove_orphans(prefix) == []  # both owners live
        owner.send_signal(signal.SIGKILL)
        owner.wait(30)
        with scratch.folder(prefix) as third:  # the next maker removes the killed one's
            assert not os.path.exists(theirs) and mine.is_dir() and third.is_dir()
        assert not third.exists()
    finally:
        owner.kill()
        owner.wait(30)
        if mine is not None:
            scratch.release(mine)
        scratch.remove_orphans(prefix)
