"""A task's TensorFlow thread pools, sized before TensorFlow starts.

On small machines every process running TensorFlow's default pools (one thread per core,
twice) oversubscribes the cores: a task takes intra-op = the cores of its host shared among
the cluster's tasks on it (at least 1) and inter-op 2, unless the launcher says otherwise
(``LABKIT_INTRA_OP_THREADS`` / ``LABKIT_INTER_OP_THREADS``). The limits go into the
environment before TensorFlow is imported, into ``tf.config`` right after (``import_tf``) and
into every TF1 ``ConfigProto`` (``labkit.tasks.tf1``).
"""

from __future__ import annotations

import os
import time

from labkit.wire.protocol import ENV_INTER_OP, ENV_INTRA_OP


def thread_limits(spec, task) -> tuple[int, int]:
    """(intra-op, inter-op) threads for ``task``: the launcher's choice, else the cores of
    this host shared among the cluster's tasks on it."""
    from labkit.core.proc import usable_cores

    env_intra, env_inter = os.environ.get(ENV_INTRA_OP), os.environ.get(ENV_INTER_OP)
    cores = usable_cores()
    here = sum(1 for t in spec.tasks() if t.host == task.host)
    intra = int(env_intra) if env_intra else max(1, cores // max(1, here))
    inter = int(env_inter) if env_inter else 2
    return intra, inter


def export(intra: int, inter: int) -> None:
    """The limits in the environment TensorFlow reads when it starts."""
    os.environ["TF_NUM_INTRAOP_THREADS"] = str(intra)
    os.environ["TF_NUM_INTEROP_THREADS"] = str(inter)


def import_tf(intra: int, inter: int):
    """``(tensorflow, seconds the import took)``, with the limits applied before any op."""
    t = time.monotonic()
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(intra)
    tf.config.threading.set_inter_op_parallelism_threads(inter)
    return tf, time.monotonic() - t
