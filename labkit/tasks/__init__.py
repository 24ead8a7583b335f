"""Programs that run as one TensorFlow cluster task each: ``python -m labkit.tasks.NAME``.

The launcher (``labkit.distributed.launch.Cluster``) starts one process per task with ``TF_CONFIG``
set; each program builds its task runtime with ``labkit.tasks.common.TaskRuntime``,
which applies thread limits, samples resources and writes the task's result JSON.
Programs report through that file and, as they go, through typed events (``labkit.wire.events``);
their log is for people, and nothing reads it to learn what happened.

- ``ps_sgd``: softmax regression on MNIST on TensorFlow's parameter-server runtime
  (``tf.compat.v1`` graph mode, ``replica_device_setter``), async SGD or sync
  (``SyncReplicasOptimizer``), stopping at a step count or a target test loss (Lab 2).
- ``ps_sparse_lr``: sparse logistic regression (a9a or synthetic click data) with the weights on
  one ps, sync (sparse accumulator + token queues) or async (scatter updates), bytes per
  step O(unique features); several runs per cluster (Lab 3).
- ``strategy_train``: a Keras model (LeNet-5, the MLP ...) on MNIST through ``labkit.learning.train_loop``
  under a ``tf.distribute`` strategy: ``MultiWorkerMirroredStrategy`` (RING all-reduce),
  ``ParameterServerStrategy`` or none, with per-epoch checkpoints a restarted task resumes
  from: Lab 4's batch sweep and kill/resume, Lab 5's ring vs PS scaling, Lab 2's modern-API
  comparison.
- ``collective_worker``: one worker of a notebook's own collective (Lab 4's ring all-reduce and
  gather/scatter): runs the notebook's phase functions, its messages relayed and counted by the
  process that started it; no TensorFlow.

``common`` is the runtime they share (its concerns in ``runtime``, ``threads``, ``files``,
``signals``, ``configs``, ``tf1`` and ``ps_shutdown``). ``PROGRAMS`` names the programs: what
``Cluster(spec, "ps_sgd")`` runs, and what the fork server imports before it forks a task.
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
