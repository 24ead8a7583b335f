"""labkit: a lab kit for learning how distributed TensorFlow training behaves, by measuring it.

Notebooks use the few names re-exported here; everything else lives in one module per
concern (see README.md, "Layout"). Importing labkit does not import TensorFlow.
"""
import os
import sys

# Quiet TensorFlow's C++ start-up chatter in notebooks and task logs; errors still show.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# rfc3987-syntax, an optional IRI format checker of jsonschema (pulled in by jupyter-events),
# builds an Earley grammar when imported: 2-7 s in every process that imports nbformat (the
# grader's runners, papermill, the tests). Nothing in labkit checks IRIs, so its processes
# skip it; nbformat's validation does not use it.
sys.modules.setdefault("rfc3987_syntax", None)

from labkit.notebook.checking import check
from labkit.datasets.loaders import DataError, load_mnist, make_dataset
from labkit.measure.monitor import ResourceSampler
from labkit.notebook.record import record

__version__ = "0.1.0"
__all__ = ["DataError", "ResourceSampler", "check", "load_mnist", "make_dataset", "record", "__version__"]
