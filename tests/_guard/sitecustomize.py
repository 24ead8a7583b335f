"""Loaded at start-up by every Python process a ``fast`` test starts (``conftest.py`` puts this
folder on ``PYTHONPATH`` while such a test runs): a process that imports TensorFlow or starts a
Jupyter kernel leaves a note in ``$LABKIT_TEST_GUARD``, and the test then fails, asking for the
marker it lacks. Processes that drop the environment or ``-I``/``-S`` are not seen."""

import contextlib
import os
import sys

WATCHED = ("tensorflow", "ipykernel")


def _note(event: str, args: tuple) -> None:
    if event == "import" and args[0] in WATCHED:
        # the test may be over and its folder gone: the process goes on, unnoted
        with contextlib.suppress(OSError), open(os.path.join(_FOLDER, f"{os.getpid()}-{args[0]}"), "w") as f:
            f.write(" ".join(sys.orig_argv)[:300])


_FOLDER = os.environ.get("LABKIT_TEST_GUARD")
if _FOLDER:
    sys.addaudithook(_note)
