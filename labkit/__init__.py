"""labkit: a lab kit for learning how distributed TensorFlow training behaves, by measuring it.

A notebook uses the few names exported here (``EXPORTS``) and its lab's API
(``labkit.labs.labN``, docs/student-api.md), nothing deeper; earlier kits' names keep working
through ``labkit.compat``. Each exported name is imported when first
asked for (PEP 562), so ``import labkit``, which every task process does, loads neither numpy nor
pandas nor TensorFlow: a task pays only for what it uses.
"""

import os

from labkit import compat
from labkit.core.registry import Registry

# What ``from labkit import NAME`` gives, by reference: imported on first use
EXPORTS = Registry(
    "name exported by labkit",
    builtin={
        "DataError": "labkit.datasets.loaders:DataError",
        "ResourceSampler": "labkit.measure.monitor:ResourceSampler",
        "check": "labkit.notebook.checking:check",
        "load_mnist": "labkit.datasets.loaders:load_mnist",
        "make_dataset": "labkit.datasets.loaders:make_dataset",
        "record": "labkit.notebook.record:record",
    },
)

# The one side effect, on purpose: every notebook imports labkit first so that TensorFlow's C++
# start-up chatter stays out of its cells and task logs (errors still show); a notebook's own
# setting wins.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

compat.install()  # earlier kits' module names keep working, with a warning naming the new place

__version__ = "0.2.0"  # the one place: pyproject.toml reads it; make release stamps it in each notebook
__all__ = [*EXPORTS, "__version__"]


def __getattr__(name: str):
    """An exported name, imported now and kept (the next lookup finds it in the module)."""
    if name in compat.FLAT:  # an earlier kit's name: found with a warning
        value = compat.flat(name)
    elif name in EXPORTS:
        value = EXPORTS[name]
    else:
        raise AttributeError(f"module 'labkit' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(EXPORTS))
