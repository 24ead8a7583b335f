"""Parameter-server shutdown, which TensorFlow does not provide: a ps blocks for ever by design.

- TF1: ``DoneSignal``, a shared queue on each ps. Every trainer enqueues once when it has
  finished (``signal_done``); each ps dequeues once per trainer (``serve_until_done``) and
  exits. A trainer that finds the ps gone when it signals has finished (``signal_done``).
- TF2 (``ParameterServerStrategy``): ps and workers exit when the chief's port closes
  (``exit_when_port_closes``).

The launcher gives a ps ``ps_grace`` seconds to leave by one of these once the trainers are done,
then terminates it.
"""

from __future__ import annotations

import threading
import time

from labkit.wire.spec import accepts, split_address
from labkit.tasks.tf1 import session_config

TRAINER_JOBS = ("chief", "worker")


class DoneSignal:
    """The TF1 parameter-server shutdown: one shared FIFO queue per ps.

    Build it in the graph of every task (same ``spec`` everywhere, before the graph is
    finalized). Each trainer runs ``enqueue`` once when it is finished; ps *i* runs
    ``dequeue(i)``, which returns once every trainer has signalled, and then exits.
    """

    def __init__(self, tf, spec, name: str = "done"):
        self.trainers = sum(spec.num_tasks(j) for j in TRAINER_JOBS)
        self.queues = [shared_queue(tf, name, ps, self.trainers) for ps in range(spec.num_tasks("ps"))]
        self.enqueue = tf.group(*[q.enqueue(1) for q in self.queues], name=f"labkit_{name}_signal")

    def dequeue(self, ps_index: int):
        return self.queues[ps_index].dequeue_many(self.trainers)


def shared_queue(tf, name: str, ps_index: int, capacity: int):
    """A FIFO queue of int32 living on ps ``ps_index`` and shared by name across tasks
    (the primitive behind ``DoneSignal``, and behind a sync-mode start barrier)."""
    with tf.compat.v1.device(f"/job:ps/task:{ps_index}"):
        return tf.compat.v1.FIFOQueue(
            capacity,
            tf.int32,
            shapes=[[]],
            shared_name=f"labkit_{name}_ps{ps_index}",
            name=f"labkit_{name}_ps{ps_index}",
        )


def serve_until_done(rt, server, done: DoneSignal, fetches=None, linger: float = 5.0, last: bool = True):
    """TF1 ps: block until every trainer has signalled ``done``, then return ``fetches``
    evaluated on the ps (e.g. the final global step).

    Before returning (the task then exits), wait up to ``linger`` seconds for every trainer to
    leave (its port closes): the last trainer's signal completes the dequeue, and a ps that left
    at once would cut the reply to it. ``last=False``: the end of one configuration of several;
    the ps serves on (the trainers go on to the next), so it neither waits for them to leave nor
    records a shutdown."""
    tf = rt.tf()
    dequeue = done.dequeue(rt.task.index)
    with tf.compat.v1.Session(server.target, config=session_config(rt)) as sess:
        rt.mark("serving")
        rt.log(f"serving until {done.trainers} trainer(s) signal done")
        sess.run(dequeue)
        value = sess.run(fetches) if fetches is not None else None
    rt.log("every trainer signalled done")
    if last:
        rt.process_result["shutdown"] = "done-queue"
        _wait_for_trainers_to_leave(rt, linger)
    return value


def _wait_for_trainers_to_leave(rt, linger: float, poll: float = 0.05) -> None:
    trainers = [t for t in rt.spec.tasks() if t.type in TRAINER_JOBS]
    deadline = time.monotonic() + linger
    while trainers and time.monotonic() < deadline:
        trainers = [t for t in trainers if accepts(t.host, t.port)]
        if trainers:
            time.sleep(poll)
    if trainers:
        rt.log(f"{', '.join(t.name for t in trainers)} still up {linger:g} s after signalling done; leaving")


def signal_done(rt, target: str, done: DoneSignal) -> None:
    """TF1 trainer: tell every ps this task is finished (run it last: after it, the ps may exit,
    and the variables with it).

    The last trainer's signal completes the ps's dequeue. The ps then waits for the trainers to
    leave (``serve_until_done``), but one that leaves anyway (its wait ran out) may cut the reply
    to that very signal: the trainer sees the connection reset (``UnavailableError``). No
    acknowledgement can close that race (the last message of any exchange can be lost), and
    nothing is lost in it: this task's training ended before, and a ps that died of anything
    else fails on its own account. So a ps found gone here is logged and recorded
    (``done_signal``), not an error."""
    tf = rt.tf()
    gone = (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError)
    try:
        with tf.compat.v1.Session(target, config=session_config(rt)) as sess:
            sess.run(done.enqueue)
        rt.result["done_signal"] = "delivered"
    except gone as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        rt.result["done_signal"] = f"ps already gone ({type(e).__name__})"
        rt.log(
            f"the ps was gone when this task signalled done ({type(e).__name__}: {first[:160]}); "
            f"training had finished, so this task ends normally"
        )


def exit_when_port_closes(rt, address: str, poll: float = 0.25) -> threading.Thread:
    """TF2 ps/worker: end this task (result written, exit 0) once ``address`` (the chief's) has
    accepted a connection and then refuses two in a row."""
    host, port = split_address(address)

    def watch():
        seen, misses = False, 0
        while True:
            if accepts(host, port, timeout=1.0):
                seen, misses = True, 0
            else:
                misses += 1 if seen else 0
                if misses >= 2:
                    rt.log(f"{address} closed; exiting")
                    rt.finish(shutdown="chief-port-closed")
            time.sleep(poll)

    thread = threading.Thread(target=watch, name="labkit-port-watch", daemon=True)
    thread.start()
    return thread
