"""Names that earlier kits' notebooks import, kept working after the kit moved them.

A notebook is written against the kit of its release; the kit may be updated mid-term. Each move
is a row of ``MOVED`` (old module -> new module) or ``FLAT`` (``from labkit import NAME`` of the
kits before the layered packages). Importing an old name gives the same module object as the new
name, with a ``KitDeprecationWarning`` that names the lab API to use instead. labkit's
``__init__`` installs the finder; nothing here imports more than the standard library.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import warnings


class KitDeprecationWarning(DeprecationWarning):
    """A name an earlier kit's notebook used; shown (once per place) even outside ``__main__``."""


HOW = "import it from your lab's API instead: `from labkit.labs.labN import NAME` (docs/student-api.md)"

# old dotted module -> the module that holds it now
MOVED: dict[str, str] = {
    "labkit.data": "labkit.datasets.loaders",
    "labkit.monitor": "labkit.measure.monitor",
    "labkit.launchers": "labkit.distributed.launchers",
    "labkit.launchers.netem": "labkit.distributed.launchers.netns",
    "labkit.learning.lr_checks": "labkit.labs.lab1.selfcheck",
    "labkit.experiments.sync_async": "labkit.labs.lab2.experiment",
    "labkit.experiments.sparse_lr": "labkit.labs.lab3.experiment",
    "labkit.experiments.dense_lr_step": "labkit.labs.lab3.dense_lr_step",
    "labkit.experiments.lenet_sweep": "labkit.labs.lab4.experiment",
    "labkit.experiments.ring_vs_ps": "labkit.labs.lab5.experiment",
}

# ``from labkit import NAME`` in the kits before the layered packages -> the module it meant
FLAT: dict[str, str] = {
    "clickdata": "labkit.datasets.clickdata",
    "cluster": "labkit.wire.spec",
    "costmodel": "labkit.learning.costmodel",
    "launch": "labkit.distributed.launch",
    "lr": "labkit.learning.lr",
    "models": "labkit.learning.models",
    "netem": "labkit.infra.netem",
    "plots": "labkit.measure.plots",
    "progress": "labkit.measure.progress",
    "scalars": "labkit.measure.scalars",
    "sparse": "labkit.learning.sparse",
    "summaries": "labkit.measure.summaries",
    "traces": "labkit.experiments.traces",
    "units": "labkit.measure.units",
}


def _outside_level() -> int:
    """The ``stacklevel`` of the first frame outside this module, labkit's ``__init__`` and the
    import system: the notebook's import statement, where the warning belongs."""
    frame, level = sys._getframe(1), 1
    inside = (__file__, __file__.rsplit("compat.py", 1)[0] + "__init__.py")
    while frame is not None:
        name = frame.f_code.co_filename
        if "importlib" in name and "_bootstrap" in name:  # warnings skips these itself: not counted
            frame = frame.f_back
            continue
        if name not in inside:
            break
        frame, level = frame.f_back, level + 1
    return level


def warn(old: str, new: str) -> None:
    warnings.warn(
        f"{old} is a name of an earlier labkit; it is {new} now. It keeps working for this term: {HOW}.",
        KitDeprecationWarning,
        stacklevel=_outside_level(),
    )


def flat(name: str):
    """The module an earlier kit exported as ``labkit.NAME``, with its warning."""
    target = FLAT[name]
    warn(f"`from labkit import {name}`", target)
    return importlib.import_module(target)


class _Alias:
    """Loads an old module name as the module that now holds it (the same object, not a copy)."""

    def __init__(self, new: str):
        self.new = new

    def create_module(self, spec):
        module = importlib.import_module(self.new)
        self._spec = module.__spec__
        return module

    def exec_module(self, module) -> None:
        module.__spec__ = self._spec  # the import system set the old name's spec: keep the real one


class MovedFinder:
    """A ``sys.meta_path`` finder for ``MOVED``'s old names (and names under a moved package)."""

    @staticmethod
    def find_spec(fullname: str, path=None, target=None):
        new = MOVED.get(fullname)
        if new is None:
            parent = next((old for old in MOVED if fullname.startswith(old + ".")), None)
            if parent is None:
                return None
            new = MOVED[parent] + fullname[len(parent) :]
        warn(fullname, new)
        return importlib.machinery.ModuleSpec(fullname, _Alias(new))


def install() -> None:
    """Once per process: the finder, and a filter that shows these warnings where they happen."""
    if not any(isinstance(f, MovedFinder) or f is MovedFinder for f in sys.meta_path):
        sys.meta_path.append(MovedFinder)
        warnings.filterwarnings("default", category=KitDeprecationWarning)
