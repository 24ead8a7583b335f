"""The runtime every task program shares.

A task program is ``python -m labkit.tasks.NAME``, started by ``labkit.launch.Cluster``
with ``TF_CONFIG`` set. It wraps its work in a ``TaskRuntime``::

    with TaskRuntime("ps_sgd", args=vars(args)) as rt:
        tf = rt.tf()                     # imports TensorFlow with this host's thread limits
        server = rt.server()             # binds the task's port (exit code 98 if it is taken)
        with rt.timed("train"):
            ...
        rt.steps["local"] = n
        rt.metrics["accuracy"] = acc
    # never reached: leaving the block writes the result JSON and ends the process

What the runtime does, and why:

- **Thread limits before TensorFlow starts.** On small machines every process running
  TF's default pools (one thread per core, twice) oversubscribes the cores; the
  runtime picks intra-op = cores / tasks on this host (at least 1) and inter-op 2,
  unless the launcher says otherwise (``LABKIT_INTRA_OP_THREADS`` /
  ``LABKIT_INTER_OP_THREADS``), and applies them to ``ConfigProto`` and ``tf.config``.
- **A hello file** (``<type>-<index>.hello.json``, one line) with the task's pid, host
  and TensorFlow/keras/labkit/Python versions, written before TensorFlow is imported,
  so the launcher can refuse a cluster whose nodes disagree. A task forked by
  ``labkit.tasks.forkserver`` (TensorFlow imported there once) also names the server, in
  the hello and the result (``forkserver``).
- **Resource samples** of this process and its host (``labkit.monitor``), so the same
  code gives per-node CPU, memory and network on a real cluster.
- **One result file** (``<type>-<index>.json``): metrics, steps, timings, series,
  samples, how the task ended. It is written first, then the process ends with
  ``os._exit``: TensorFlow's teardown (tf.data iterators, gRPC) can stall for seconds
  after the work is done, and nothing after the result matters.
- **Clean ends.** SIGTERM (the launcher stopping the cluster, or the launcher dying: the
  kernel sends it to a local task whose launcher exits, ``labkit.proc``, and a remote
  task's wrapper sends it when the ssh session ends, ``launch.remote_command``) writes
  the result with ``shutdown: "terminated"`` and exits 143, even while the main thread
  is inside a TensorFlow call, and even when nobody reads the task's output any more.
  An exception writes the traceback into the result and the log and exits 1.
- **Several configurations in one process** (``--configs``, ``configurations``): TensorFlow's
  start-up (import, server, strategy) is paid once, and each configuration runs inside
  ``rt.configuration(config)``, which gives it fresh ``metrics``/``steps``/``timings``/
  ``series``, marks its window in the samples, and writes its own result file when it ends
  (``results.configuration_file``; the samples over its window and the process's baseline
  then, ``results.configuration_part``), so a task killed later keeps the configurations it
  finished. The program makes everything else fresh per configuration (graphs, variables,
  datasets, checkpoints); what a process cannot make twice is said where it is made.
- **Parameter-server shutdown**, which TensorFlow does not provide: ``DoneSignal`` (TF1:
  every trainer enqueues once into a shared queue on each ps, which dequeues once per
  trainer and exits; a trainer that finds the ps gone when it signals has finished, see
  ``signal_done``) and ``exit_when_port_closes`` (TF2: ps and workers exit when the
  chief's port closes).

This module imports TensorFlow only inside ``TaskRuntime.tf()``.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import psutil

from labkit.cluster import accepts, from_tf_config, port_is_free, split_address
from labkit.results import configuration_file, configuration_part

# re-exported: task programs and the grader name these through the runtime
from labkit.protocol import (ENV_INTER_OP, ENV_INTRA_OP, ENV_RUN_DIR, EXIT_ERROR,  # noqa: F401
                             EXIT_OK, EXIT_PORT_IN_USE, EXIT_TERMINATED, RESULT_FORMAT, PortInUse, task_file,
                             versions)

TRAINER_JOBS = ("chief", "worker")
# The log lines that open and close a configuration (the experiments follow them: progress, timeouts).
CONFIGURATION_LINE = re.compile(r"\] configuration (?P<number>\d+)/(?P<count>\d+) (?P<name>\S+): (?P<event>start|done)$")
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")


@dataclass(frozen=True)
class Configuration:
    """One configuration a task runs: its place in the list, its name (None: the task's only one,
    whose results are the process's own) and the program's arguments with its own on top."""
    index: int
    count: int
    name: str | None
    args: argparse.Namespace

    def describe(self) -> dict:
        return {"index": self.index, "count": self.count, "name": self.name}


def add_configs_option(parser: argparse.ArgumentParser, varying: tuple[str, ...]) -> None:
    """``--configs JSON``: the configurations to run one after the other in this process."""
    parser.add_argument("--configs", default=None, metavar="JSON",
                        help="several configurations, one after the other in this process (TensorFlow starts "
                             "once): a JSON list of objects, each with 'name' (its result files are "
                             "NAME.<task>.json in the run directory) and any of: " + ", ".join(varying))


def configurations(parser: argparse.ArgumentParser, args: argparse.Namespace, varying: tuple[str, ...],
                   check=None) -> list[Configuration]:
    """The configurations of ``--configs`` (see ``add_configs_option``), each checked with
    ``check(parser, args)`` as the command line is; without it, one: the command line's."""
    if args.configs is None:
        return [Configuration(0, 1, None, args)]
    try:
        items = json.loads(args.configs)
    except json.JSONDecodeError as e:
        parser.error(f"--configs is not JSON ({e})")
    if not isinstance(items, list) or not items or not all(isinstance(i, dict) for i in items):
        parser.error('--configs must be a JSON list of objects, e.g. [{"name": "b50", "batch_size": 50}]')
    out, names = [], set()
    for index, item in enumerate(items):
        name = item.get("name")
        if not isinstance(name, str) or not _NAME.match(name) or name in names:
            parser.error(f"configuration {index + 1} of --configs needs a 'name' of its own, one path component of "
                         f"letters, digits, '_', '-' or '.'; got {name!r}")
        names.add(name)
        unknown = sorted(set(item) - {"name"} - set(varying))
        if unknown:
            parser.error(f"configuration {name!r} sets {unknown}, which must be the same for every configuration "
                         f"of a cluster; a configuration may set: {', '.join(varying)}")
        merged = argparse.Namespace(**{**vars(args), **{k: v for k, v in item.items() if k != "name"},
                                       "configs": None})
        if check is not None:
            check(parser, merged)
        out.append(Configuration(index, len(items), name, merged))
    return out


def mnist_for(args, cache: dict):
    """The MNIST split ``args`` names (``train_limit``, ``test_limit``, ``seed``), loaded once per
    split into ``cache``: a process's configurations that train on the same split share its arrays."""
    from labkit.data import load_mnist

    key = (args.train_limit, args.test_limit, args.seed)
    if key not in cache:
        cache[key] = load_mnist(limit=args.train_limit, test_limit=args.test_limit, seed=args.seed)
    return cache[key]


def thread_limits(spec, task) -> tuple[int, int]:
    """(intra-op, inter-op) threads for ``task``: the launcher's choice, else the cores of
    this host shared among the cluster's tasks on it."""
    from labkit.proc import usable_cores

    env_intra, env_inter = os.environ.get(ENV_INTRA_OP), os.environ.get(ENV_INTER_OP)
    cores = usable_cores()
    here = sum(1 for t in spec.tasks() if t.host == task.host)
    intra = int(env_intra) if env_intra else max(1, cores // max(1, here))
    inter = int(env_inter) if env_inter else 2
    return intra, inter


def write_json(path: Path, data: dict, indent: int | None = None) -> None:
    """Write atomically (temporary file + rename): a reader never sees half a file."""
    from labkit.record import to_jsonable

    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(to_jsonable(data), indent=indent) + "\n")
    os.replace(tmp, path)


class TaskRuntime:
    """One task's runtime (see the module docstring). Leaving the ``with`` block ends
    the process after writing the result; so does SIGTERM."""

    def __init__(self, program: str, args: dict | None = None, sample_interval: float = 0.5):
        self.started_epoch = psutil.Process().create_time()  # counts interpreter start-up too
        self.spec, self.task = from_tf_config()
        self.run_dir = Path(os.environ.get(ENV_RUN_DIR, ".")).resolve()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.intra_op, self.inter_op = thread_limits(self.spec, self.task)
        os.environ["TF_NUM_INTRAOP_THREADS"] = str(self.intra_op)
        os.environ["TF_NUM_INTEROP_THREADS"] = str(self.inter_op)
        self.sample_interval = sample_interval
        self.metrics: dict = {}
        self.steps: dict = {}
        self.timings: dict = {}
        self.series: dict[str, list] = {}
        self.result = {
            "format": RESULT_FORMAT, "program": program, "task": self.task.name, "type": self.task.type,
            "index": self.task.index, "address": self.task.address, "host": socket.gethostname(),
            "pid": os.getpid(), "versions": versions(), "args": dict(args or {}),
            "threads": {"intra_op": self.intra_op, "inter_op": self.inter_op}, "started_epoch": self.started_epoch,
            "metrics": self.metrics, "steps": self.steps, "timings": self.timings, "series": self.series,
        }
        if os.environ.get("LABKIT_FORKSERVER"):  # forked from labkit.tasks.forkserver, TensorFlow imported there
            self.result["forkserver"] = json.loads(os.environ["LABKIT_FORKSERVER"])
        self._process = self.result        # the process's own result; a configuration swaps in its own
        self._config: Configuration | None = None
        self._sampler = None
        self._tf = None
        self._finishing = threading.Lock()
        self._warming = False
        self._handle_sigterm()
        # The hello says: alive, and a SIGTERM from now on ends in a result file.
        write_json(self.path(".hello.json"), {k: self.result[k] for k in
                                              ("task", "host", "pid", "versions", "program", "started_epoch",
                                               "forkserver") if k in self.result})
        if not port_is_free(self.task.port):  # fail in a second, not after TensorFlow's import
            self.finish(PortInUse(self.task.name, self.task.address, " (found before importing TensorFlow)"))

    # ------------------------------------------------------------------ basics
    def path(self, suffix: str) -> Path:
        return self.run_dir / task_file(self.task.type, self.task.index, suffix)

    @property
    def is_chief(self) -> bool:
        """The chief job's task, or worker 0 when there is no chief job (the TF1 convention)."""
        if "chief" in self.spec.jobs:
            return self.task.type == "chief"
        return self.task.type == "worker" and self.task.index == 0

    @property
    def num_trainers(self) -> int:
        """Tasks that train (chief + workers); the ps waits for this many done signals."""
        return sum(self.spec.num_tasks(j) for j in TRAINER_JOBS)

    @property
    def trainer_rank(self) -> int:
        """0 for the chief, then the workers in order: which shard of the data this task reads."""
        if self.task.type == "chief":
            return 0
        return self.task.index + self.spec.num_tasks("chief")

    def since_start(self) -> float:
        return time.time() - self.started_epoch

    def mark(self, label: str) -> None:
        """Mark this moment in the samples; inside a configuration, as ``"<name>: <label>"``."""
        if self._sampler is not None:
            self._sampler.mark(f"{self._config.name}: {label}" if self._config is not None else label)

    def first_step(self) -> None:
        """Note that training begins (once per process): ``first_step_epoch`` in the result and
        ``timings["first_step_s"]`` since the process started, TensorFlow's start-up."""
        if "first_step_epoch" not in self._process:
            self._process["first_step_epoch"] = time.time()
            self._process["timings"]["first_step_s"] = self.since_start()

    @contextlib.contextmanager
    def configuration(self, config: Configuration):
        """Run one configuration of several in this process (see the module docstring).

        Inside the block ``metrics``, ``steps``, ``timings``, ``series`` and ``result`` are the
        configuration's own, marks are named ``"<name>: <label>"``, and the log says
        ``configuration 2/3 NAME: start`` / ``done``. Leaving the block writes the configuration's
        result file (``results.configuration_file``): its results, its args, the process's samples
        over its window and the baseline when it began; an exception is recorded there too, and
        raised on (the task fails). A configuration without a name is the process's only one:
        its results are the process's own, as without ``--configs``."""
        if config.name is None:
            yield self
            return
        base = self._process
        self.metrics, self.steps, self.timings, self.series = {}, {}, {}, {}
        self.result = {**{k: base[k] for k in ("format", "program", "task", "type", "index", "address", "host",
                                               "pid", "versions", "threads", "started_epoch")},
                       "args": {k: v for k, v in vars(config.args).items() if k != "configs"},
                       "configuration": config.describe(), "metrics": self.metrics, "steps": self.steps,
                       "timings": self.timings, "series": self.series}
        self._config = config
        started = self.result["configuration_started_epoch"] = time.time()
        self.log(f"configuration {config.index + 1}/{config.count} {config.name}: start")
        self.mark("start")
        status = "error"
        try:
            yield self
            status = "ok"
        except BaseException:
            self.result["error"] = traceback.format_exc()
            raise
        finally:
            self.mark("end")
            self._write_configuration(config, started, status)
            self._config = None
            self.result = base
            self.metrics, self.steps, self.timings, self.series = (base["metrics"], base["steps"], base["timings"],
                                                                   base["series"])
            base.setdefault("configurations", []).append({"name": config.name, "status": status,
                                                          "started_epoch": started, "ended_epoch": time.time()})
        self.log(f"configuration {config.index + 1}/{config.count} {config.name}: done")

    def _write_configuration(self, config: Configuration, started: float, status: str) -> None:
        """The configuration's result file, as a task's own: its results, and the samples over its window."""
        out, ended = self.result, time.time()
        out.update(status=status, shutdown="finished", ended_epoch=ended)
        self.timings["total_s"] = ended - started
        if self.steps.get("local") and self.timings.get("train_s"):
            self.steps["local_per_s"] = self.steps["local"] / self.timings["train_s"]
        if self._sampler is not None:
            self._sampler.sample_now()
            out.update(configuration_part(self._sampler.to_dict(), started, ended, prefix=f"{config.name}: "))
        write_json(self.run_dir / configuration_file(config.name, self.task.type, self.task.index), out)

    @contextlib.contextmanager
    def timed(self, name: str):
        """Time a phase into ``timings[name + "_s"]`` and mark its start and end in the samples."""
        self.mark(f"{name} start")
        t = time.monotonic()
        try:
            yield
        finally:
            self.timings[f"{name}_s"] = time.monotonic() - t
            self.mark(f"{name} end")

    def log(self, *parts) -> None:
        """A line in this task's log, with the time since the process started. A log that
        is gone (a remote task's ssh session closed) loses the line, never the task."""
        try:
            print(f"[{self.task.name} {self.since_start():7.2f}s]", *parts, flush=True)
        except OSError:  # BrokenPipeError, EIO: nobody reads this output any more
            pass

    # -------------------------------------------------------------- TensorFlow
    def tf(self):
        """``import tensorflow``, with this task's thread limits applied before any op."""
        if self._tf is None:
            t = time.monotonic()
            import tensorflow as tf

            tf.config.threading.set_intra_op_parallelism_threads(self.intra_op)
            tf.config.threading.set_inter_op_parallelism_threads(self.inter_op)
            self.timings["import_tf_s"] = time.monotonic() - t
            self._tf = tf
        return self._tf

    def session_config(self, device_filters=None):
        """A ``ConfigProto`` with the thread limits and device filters.

        Default filters: a trainer sees the ps job and itself, a ps sees the ps job.
        Without them a session waits for every worker to be up, and one opened after a
        peer has exited hangs ("CreateSession still waiting for response from worker").
        """
        tf = self.tf()
        if device_filters is None:
            own = f"/job:{self.task.type}/task:{self.task.index}"
            device_filters = ["/job:ps"] if self.task.type == "ps" else ["/job:ps", own]
        return tf.compat.v1.ConfigProto(intra_op_parallelism_threads=self.intra_op,
                                        inter_op_parallelism_threads=self.inter_op,
                                        device_filters=list(device_filters))

    def server(self):
        """Start this task's ``tf.distribute.Server`` on its TF_CONFIG address.

        TensorFlow 2.21's gRPC server listens on 0.0.0.0:PORT whatever host the spec
        names; a taken port raises ``PortInUse`` (exit code 98)."""
        tf = self.tf()
        try:
            server = tf.distribute.Server(tf.train.ClusterSpec(self.spec.as_dict()), job_name=self.task.type,
                                          task_index=self.task.index, config=self.session_config(), start=True)
        except tf.errors.UnknownError as e:
            if "Could not start" in str(e):
                raise PortInUse(self.task.name, self.task.address, ": TensorFlow's server could not listen on it") \
                    from e
            raise
        self.timings["server_up_s"] = self.since_start()
        self.mark("server up")
        self.log(f"server up at {self.task.address} ({self.timings['server_up_s']:.1f} s after process start)")
        self.warm_up()
        return server

    def warm_up(self) -> None:
        """Import what writing the result needs (pandas, for the samples) on a thread,
        so that the exit stays prompt. ``server()`` calls it; a program that starts its
        servers another way (a ``tf.distribute`` strategy) calls it once they are up,
        while it waits on its peers."""
        if "pandas" in sys.modules or self._warming:
            return
        self._warming = True

        def load():
            import pandas  # noqa: F401

        threading.Thread(target=load, name="labkit-warm-up", daemon=True).start()

    # ------------------------------------------------- parameter-server shutdown
    def serve_until_done(self, server, done: "DoneSignal", fetches=None, linger: float = 5.0, last: bool = True):
        """TF1 ps: block until every trainer has signalled ``done``, then return
        ``fetches`` evaluated on the ps (e.g. the final global step).

        Before returning (the task then exits), wait up to ``linger`` seconds for every
        trainer to leave (its port closes): the last trainer's signal completes the dequeue,
        and a ps that left at once would cut the reply to it. ``last=False``: the end of one
        configuration of several; the ps serves on (the trainers go on to the next), so it
        neither waits for them to leave nor records a shutdown."""
        tf = self.tf()
        dequeue = done.dequeue(self.task.index)
        with tf.compat.v1.Session(server.target, config=self.session_config()) as sess:
            self.mark("serving")
            self.log(f"serving until {done.trainers} trainer(s) signal done")
            sess.run(dequeue)
            value = sess.run(fetches) if fetches is not None else None
        self.log("every trainer signalled done")
        if last:
            self._process["shutdown"] = "done-queue"
            self._wait_for_trainers_to_leave(linger)
        return value

    def _wait_for_trainers_to_leave(self, linger: float, poll: float = 0.05) -> None:
        trainers = [t for t in self.spec.tasks() if t.type in TRAINER_JOBS]
        deadline = time.monotonic() + linger
        while trainers and time.monotonic() < deadline:
            trainers = [t for t in trainers if accepts(t.host, t.port)]
            if trainers:
                time.sleep(poll)
        if trainers:
            self.log(f"{', '.join(t.name for t in trainers)} still up {linger:g} s after signalling done; leaving")

    def signal_done(self, target: str, done: "DoneSignal") -> None:
        """TF1 trainer: tell every ps this task is finished (run it last: after it, the
        ps may exit, and the variables with it).

        The last trainer's signal completes the ps's dequeue. The ps then waits for the
        trainers to leave (``serve_until_done``), but one that leaves anyway (its wait ran
        out) may cut the reply to that very signal: the trainer sees the connection reset
        (``UnavailableError``). No acknowledgement can close that race (the last message of
        any exchange can be lost), and nothing is lost in it: this task's training ended
        before, and a ps that died of anything else fails on its own account. So a ps found
        gone here is logged and recorded (``done_signal``), not an error."""
        tf = self.tf()
        gone = (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError)
        try:
            with tf.compat.v1.Session(target, config=self.session_config()) as sess:
                sess.run(done.enqueue)
            self.result["done_signal"] = "delivered"
        except gone as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            self.result["done_signal"] = f"ps already gone ({type(e).__name__})"
            self.log(f"the ps was gone when this task signalled done ({type(e).__name__}: {first[:160]}); "
                     f"training had finished, so this task ends normally")

    def session_creator(self, server, scaffold=None, max_wait_secs: float = 300, recovery_wait_secs: float = 0.2):
        """TF1 ``SessionCreator`` for ``MonitoredSession``: the chief initializes the
        variables; other trainers wait for them, polling every ``recovery_wait_secs`` (a
        configuration of several waits for the chief's initialization each time).

        ``MonitoredTrainingSession`` builds the same creators, but its non-chief one
        sleeps a hard-coded 30 s between polls, so a worker that starts before the chief
        has initialized the variables idles for 30 s while the chief trains alone
        (``recovery_wait_secs=30`` does the same)."""
        tf = self.tf()
        scaffold = scaffold or tf.compat.v1.train.Scaffold()
        config = self.session_config()
        if self.is_chief:
            return tf.compat.v1.train.ChiefSessionCreator(scaffold=scaffold, master=server.target, config=config)

        class WorkerSessionCreator(tf.compat.v1.train.SessionCreator):
            def create_session(self):
                scaffold.finalize()
                manager = tf.compat.v1.train.SessionManager(
                    local_init_op=scaffold.local_init_op, local_init_feed_dict=scaffold.local_init_feed_dict,
                    ready_op=scaffold.ready_op, ready_for_local_init_op=scaffold.ready_for_local_init_op,
                    graph=tf.compat.v1.get_default_graph(), recovery_wait_secs=recovery_wait_secs)
                sess = manager.wait_for_session(server.target, config=config, max_wait_secs=max_wait_secs)
                if sess is None:
                    raise TimeoutError(f"waited {max_wait_secs:.0f} s for the chief to initialize the variables; "
                                       "is the chief running? (see its log)")
                return sess

        return WorkerSessionCreator()

    def exit_when_port_closes(self, address: str, poll: float = 0.25) -> threading.Thread:
        """TF2 ps/worker: end this task (result written, exit 0) once ``address`` (the
        chief's) has accepted a connection and then refuses two in a row."""
        host, port = split_address(address)

        def watch():
            seen, misses = False, 0
            while True:
                if accepts(host, port, timeout=1.0):
                    seen, misses = True, 0
                else:
                    misses += 1 if seen else 0
                    if misses >= 2:
                        self.log(f"{address} closed; exiting")
                        self.finish(shutdown="chief-port-closed")
                time.sleep(poll)

        thread = threading.Thread(target=watch, name="labkit-port-watch", daemon=True)
        thread.start()
        return thread

    # -------------------------------------------------------------------- end
    def __enter__(self) -> "TaskRuntime":
        from labkit.monitor import ResourceSampler

        self._sampler = ResourceSampler(interval=self.sample_interval).start()
        self.mark("start")
        return self

    def __exit__(self, exc_type, exc, tb):
        self.finish(exc)

    def finish(self, exc: BaseException | None = None, shutdown: str | None = None, code: int | None = None):
        """Write the result file and end the process. Runs once; a second caller (a
        signal during the first) waits for the exit."""
        self._finishing.acquire()
        try:
            if self._config is not None:  # ended inside a configuration: the process's own result is written
                self._process["configuration_running"] = self._config.name
                self.result, self.timings, self.steps = self._process, self._process["timings"], self._process["steps"]
                self._config = None
            if shutdown is not None:
                self.result["shutdown"] = shutdown
            self.result.setdefault("shutdown", "finished")
            if isinstance(exc, SystemExit) and exc.code in (None, 0):
                exc = None  # sys.exit() / sys.exit(0) inside the block: a normal end
            if exc is not None:
                text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
                _say(text)
                self.result.update(status="error", error=text)
                code = EXIT_PORT_IN_USE if isinstance(exc, PortInUse) else EXIT_ERROR
            else:
                self.result["status"] = "terminated" if self.result["shutdown"] == "terminated" else "ok"
                code = EXIT_OK if code is None else code
            self.timings["total_s"] = self.since_start()
            if self.steps.get("local") and self.timings.get("train_s"):
                self.steps["local_per_s"] = self.steps["local"] / self.timings["train_s"]
            if self._sampler is not None and self.result["shutdown"] == "terminated" and "pandas" not in sys.modules:
                # stopped during start-up: importing pandas for a few samples would only
                # delay the exit the launcher is waiting for
                self._sampler.stop()
                self.result["samples_skipped"] = "terminated before start-up finished"
            elif self._sampler is not None:
                self.mark("end")
                self._sampler.stop()
                self.result["samples"] = self._sampler.to_dict()
                self.result["resources"] = self._sampler.summary()
                labels = {m.label for m in self._sampler.marks}
                if {"train start", "train end"} <= labels:
                    self.result["resources_train"] = self._sampler.summary("train start", "train end")
            self.result["ended_epoch"] = time.time()
            write_json(self.path(".json"), self.result)
        except BaseException:  # the process ends either way; say why the result is missing
            _say("labkit: could not write the task result:\n" + traceback.format_exc())
            code = EXIT_ERROR
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):  # a closed or broken log must not keep the process alive
                    pass
            os._exit(code if code is not None else EXIT_ERROR)

    def _handle_sigterm(self) -> None:
        """Route SIGTERM to a thread that writes the result and exits.

        The main thread may sit in a TensorFlow call for ever (a ps serving), where a
        Python signal handler would never run. Python's C-level handler, though, writes
        the signal number to the wakeup fd at once, whichever thread the kernel picked;
        a watcher thread blocked on that pipe does the work."""
        if threading.current_thread() is not threading.main_thread():
            return
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)
        signal.signal(signal.SIGTERM, lambda *_: None)  # the watcher acts; the main thread need not
        signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)

        def watch():
            while os.read(read_end, 1) != bytes([signal.SIGTERM]):
                pass
            try:
                self.log("SIGTERM: writing the result and exiting")
            finally:  # whatever happens, this thread ends the process: it is the only one that acts on SIGTERM
                self.finish(shutdown="terminated", code=EXIT_TERMINATED)

        threading.Thread(target=watch, name="labkit-sigterm", daemon=True).start()


def _say(text: str) -> None:
    """``text`` on stderr, if anyone still reads it."""
    try:
        print(text, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def run_graph_task(rt: TaskRuntime, args, run_ps, run_trainer) -> None:
    """The start of a TF1 graph-mode program (ps_sgd, sparse_lr): TensorFlow in graph mode,
    the v1 API's deprecation notices off (once per task and class, they bury the log), the
    task's server, then its role: ``run_ps`` on a ps, ``run_trainer`` on the chief and
    workers, each called as ``(rt, tf, server, args)``."""
    tf = rt.tf()
    tf.compat.v1.disable_eager_execution()
    tf.get_logger().setLevel("ERROR")
    server = rt.server()
    (run_ps if rt.task.type == "ps" else run_trainer)(rt, tf, server, args)


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
        return tf.compat.v1.FIFOQueue(capacity, tf.int32, shapes=[[]], shared_name=f"labkit_{name}_ps{ps_index}",
                                      name=f"labkit_{name}_ps{ps_index}")


def define_function(source: str, name: str, option: str, signature: str):
    """The function ``name`` that Python ``source`` defines: a notebook's own exercise, sent to
    the tasks with ``option`` (``--round-source``), so the cluster trains with the student's
    code (the student kit has no reference to fall back on)."""
    namespace: dict = {}
    exec(compile(source, f"<{option}>", "exec"), namespace)  # the student's own code
    fn = namespace.get(name)
    if not callable(fn):
        raise ValueError(f"{option} must define a function {name}{signature}")
    return fn
