"""Loaded at start-up by every Python process the suite starts (``conftest.py`` puts this folder on
``PYTHONPATH`` for the whole run). Two jobs:

- **The fast lane's guard.** While a ``fast`` test runs (``$LABKIT_TEST_GUARD`` names its notes
  folder), a process that imports TensorFlow or starts a Jupyter kernel leaves a note there, and the
  test then fails, asking for the marker it lacks.
- **Nothing but people read a task's log.** With ``$LABKIT_TEST_REWORD`` set (the whole
  run), every task's ``TaskRuntime.log`` writes its words reversed, after a ``~``: a cluster test that
  passes shows that the kit and the labs read no task's log lines. ``labkit.tasks.runtime`` is patched
  when something imports it, so a process that never starts a task pays nothing.

Processes that drop the environment or run ``-I``/``-S`` (the grader's sandbox, ssh to a node) are
not seen."""

import contextlib
import importlib.abc
import importlib.machinery
import os
import sys

WATCHED = ("tensorflow", "ipykernel")
RUNTIME = "labkit.tasks.runtime"


def _note(event: str, args: tuple) -> None:
    if event == "import" and args[0] in WATCHED:
        # the test may be over and its folder gone: the process goes on, unnoted
        with contextlib.suppress(OSError), open(os.path.join(_FOLDER, f"{os.getpid()}-{args[0]}"), "w") as f:
            f.write(" ".join(sys.orig_argv)[:300])


def _reworded(said):
    def log(self, *parts) -> None:
        said(self, "~", " ".join(word[::-1] for word in " ".join(map(str, parts)).split()[::-1]))

    return log


class _RewordOnImport(importlib.abc.MetaPathFinder):
    """Finds ``labkit.tasks.runtime`` as the path finder would, and rewords its ``TaskRuntime.log``
    once the module has run."""

    def find_spec(self, name, path, target=None):
        if name != RUNTIME:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            module.TaskRuntime.log = _reworded(module.TaskRuntime.log)

        spec.loader.exec_module = exec_module
        return spec


_FOLDER = os.environ.get("LABKIT_TEST_GUARD")
if _FOLDER:
    sys.addaudithook(_note)
if os.environ.get("LABKIT_TEST_REWORD"):
    if RUNTIME in sys.modules:  # loaded before this file ran (conftest.py runs it in its own process)
        runtime = sys.modules[RUNTIME]
        runtime.TaskRuntime.log = _reworded(runtime.TaskRuntime.log)
    else:
        sys.meta_path.insert(0, _RewordOnImport())
