"""Programs that run as one TensorFlow cluster task each: ``python -m labkit.tasks.NAME``.

``PROGRAMS`` names them: what ``Cluster(spec, "ps_sgd")`` runs, and what the fork server imports
before it forks a task. Each builds its runtime with ``labkit.tasks.common.TaskRuntime`` and
reports through its result file and typed events (``labkit.wire.events``), never its log:

- ``ps_sgd``: Lab 2's softmax regression on the ``tf.compat.v1`` parameter-server runtime;
- ``ps_sparse_lr``: Lab 3's sparse logistic regression with the weights on one ps;
- ``strategy_train``: a Keras model under a ``tf.distribute`` strategy (Labs 4 and 5, Lab 2's
  modern-API comparison), with per-epoch checkpoints a restarted task resumes from;
- ``collective_worker``: one worker of a notebook's own collective (Lab 4), no TensorFlow.

More in docs/internals.md, "The task programs".
"""

from labkit.core.registry import Registry

# The task programs by module name, as ``Cluster(spec, "ps_sgd")`` takes it -> the module its tasks
# run (``python -m``): the launcher names them and imports none. "sparse_lr" is the name
# ps_sparse_lr had before.
PROGRAMS = Registry(
    "task program",
    builtin={
        "ps_sgd": "labkit.tasks.ps_sgd",
        "ps_sparse_lr": "labkit.tasks.ps_sparse_lr",
        "strategy_train": "labkit.tasks.strategy_train",
        "collective_worker": "labkit.tasks.collective_worker",
    },
    hint="or a dotted module name",
    aliases={"sparse_lr": "ps_sparse_lr"},
)
