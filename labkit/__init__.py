"""labkit: a lab kit for learning how distributed TensorFlow training behaves, by measuring it.

Notebooks use the few names re-exported here; everything else lives in one module per
concern (see README.md, "Layout"). Importing labkit does not import TensorFlow.
"""
import os

# Quiet TensorFlow's C++ start-up chatter in notebooks and task logs; errors still show.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from labkit.data import DataError, load_mnist, make_dataset
from labkit.monitor import ResourceSampler
from labkit.record import record

__version__ = "0.1.0"
__all__ = ["DataError", "ResourceSampler", "load_mnist", "make_dataset", "record", "__version__"]
