"""SIGTERM ends a task with its result written, whatever its main thread is doing.

The launcher stops a cluster with SIGTERM (and so does the kernel when the launcher dies,
``labkit.core.proc``, and a remote task's wrapper when its ssh session ends). The main thread may
sit in a TensorFlow call for ever (a ps serving), where a Python signal handler would never
run; Python's C-level handler, though, writes the signal number to the wakeup descriptor at
once, whichever thread the kernel picked, and a watcher thread blocked on that pipe acts.
"""

from __future__ import annotations

import os
import signal
import sys
import threading


def on_sigterm(act) -> None:
    """Call ``act()`` on a thread of its own when SIGTERM arrives (from the main thread only:
    elsewhere, nothing). ``act`` ends the process; nothing else handles SIGTERM."""
    if threading.current_thread() is not threading.main_thread():
        return
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    signal.signal(signal.SIGTERM, lambda *_: None)  # the watcher acts; the main thread need not
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)

    def watch():
        while os.read(read_end, 1) != bytes([signal.SIGTERM]):
            pass
        act()

    threading.Thread(target=watch, name="labkit-sigterm", daemon=True).start()


def say(text: str) -> None:
    """``text`` on stderr, if anyone still reads it."""
    try:
        print(text, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass
