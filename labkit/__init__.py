"""labkit: a lab kit for learning how distributed TensorFlow training behaves, by measuring it.

Notebooks use the few names re-exported here, and the modules of the packages below, named for
the kit's layers (see README.md, "Layout"). Importing labkit does not import TensorFlow.
"""

import os

from labkit.datasets.loaders import DataError, load_mnist, make_dataset
from labkit.measure.monitor import ResourceSampler
from labkit.notebook.checking import check
from labkit.notebook.record import record

# The one side effect, on purpose: every notebook imports labkit first so that TensorFlow's C++
# start-up chatter stays out of its cells and task logs (errors still show); a notebook's own
# setting wins.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

__version__ = "0.1.0"  # the one place: pyproject.toml reads it
__all__ = ["DataError", "ResourceSampler", "check", "load_mnist", "make_dataset", "record", "__version__"]
