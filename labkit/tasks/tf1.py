"""TensorFlow 1 graph-mode helpers a task needs beside its own graph (ps_sgd, sparse_lr).

- ``session_config``: a ``ConfigProto`` with the task's thread limits and device filters.
  Without the filters a session waits for every worker to be up, and one opened after a peer
  has exited hangs ("CreateSession still waiting for response from worker").
- ``session_creator``: the chief initializes the variables, the other trainers wait for them,
  polling every ``recovery_wait_secs``. ``MonitoredTrainingSession`` builds the same creators,
  but its non-chief one sleeps a hard-coded 30 s between polls, so a worker that starts before
  the chief has initialized the variables idles for 30 s while the chief trains alone
  (``recovery_wait_secs=30`` does the same).
- ``run_graph_task``: the start every graph-mode program shares.
"""

from __future__ import annotations


def session_config(rt, device_filters=None):
    """A ``ConfigProto`` with ``rt``'s thread limits and device filters (default: a trainer sees
    the ps job and itself, a ps sees the ps job)."""
    tf = rt.tf()
    if device_filters is None:
        own = f"/job:{rt.task.type}/task:{rt.task.index}"
        device_filters = ["/job:ps"] if rt.task.type == "ps" else ["/job:ps", own]
    return tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=rt.intra_op,
        inter_op_parallelism_threads=rt.inter_op,
        device_filters=list(device_filters),
    )


def session_creator(rt, server, scaffold=None, max_wait_secs: float = 300, recovery_wait_secs: float = 0.2):
    """TF1 ``SessionCreator`` for ``MonitoredSession`` (see the module docstring): a configuration
    of several waits for the chief's initialization each time."""
    tf = rt.tf()
    scaffold = scaffold or tf.compat.v1.train.Scaffold()
    config = session_config(rt)
    if rt.is_chief:
        return tf.compat.v1.train.ChiefSessionCreator(scaffold=scaffold, master=server.target, config=config)

    class WorkerSessionCreator(tf.compat.v1.train.SessionCreator):
        def create_session(self):
            scaffold.finalize()
            manager = tf.compat.v1.train.SessionManager(
                local_init_op=scaffold.local_init_op,
                local_init_feed_dict=scaffold.local_init_feed_dict,
                ready_op=scaffold.ready_op,
                ready_for_local_init_op=scaffold.ready_for_local_init_op,
                graph=tf.compat.v1.get_default_graph(),
                recovery_wait_secs=recovery_wait_secs,
            )
            sess = manager.wait_for_session(server.target, config=config, max_wait_secs=max_wait_secs)
            if sess is None:
                raise TimeoutError(
                    f"waited {max_wait_secs:.0f} s for the chief to initialize the variables; "
                    "is the chief running? (see its log)"
                )
            return sess

    return WorkerSessionCreator()


def run_graph_task(rt, args, run_ps, run_trainer) -> None:
    """The start of a TF1 graph-mode program: TensorFlow in graph mode, the v1 API's deprecation
    notices off (once per task and class, they bury the log), the task's server, then its role:
    ``run_ps`` on a ps, ``run_trainer`` on the chief and workers, each called as
    ``(rt, tf, server, args)``."""
    tf = rt.tf()
    tf.compat.v1.disable_eager_execution()
    tf.get_logger().setLevel("ERROR")
    server = rt.server()
    (run_ps if rt.task.type == "ps" else run_trainer)(rt, tf, server, args)


def define_function(source: str, name: str, option: str, signature: str):
    """The function ``name`` that Python ``source`` defines: a notebook's own exercise, sent to
    the tasks with ``option`` (``--gradient-source``, say), so the cluster trains with the student's
    code (the student kit has no reference to fall back on)."""
    namespace: dict = {}
    exec(compile(source, f"<{option}>", "exec"), namespace)  # the student's own code
    fn = namespace.get(name)
    if not callable(fn):
        raise ValueError(f"{option} must define a function {name}{signature}")
    return fn
