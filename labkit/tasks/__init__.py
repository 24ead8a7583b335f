"""Programs that run as one TensorFlow cluster task each: ``python -m labkit.tasks.NAME``.

The launcher (``labkit.launch.Cluster``) starts one process per task with ``TF_CONFIG``
set; each program builds its task runtime with ``labkit.tasks.common.TaskRuntime``,
which applies thread limits, samples resources and writes the task's result JSON.
Programs report through that file, never through stdout.

- ``ps_sgd``: softmax regression on MNIST on TensorFlow's parameter-server runtime
  (``tf.compat.v1`` graph mode, ``replica_device_setter``), async SGD or sync
  (``SyncReplicasOptimizer``), stopping at a step count or a target test loss (Lab 2).
- ``sparse_lr``: sparse logistic regression (a9a or synthetic click data) with the weights on
  one ps, sync (sparse accumulator + token queues) or async (scatter updates), bytes per
  step O(unique features); several runs per cluster (Lab 3).
"""
