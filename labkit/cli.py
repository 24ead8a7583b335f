"""``python -m labkit``: the command line. Each subcommand parses its arguments here and
calls one function of the module that does the work."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from labkit.core import inert


def _data(args) -> int:
    from labkit.datasets import loaders as data

    names = args.dataset or ["mnist"]
    try:
        for name in names:
            if args.action == "fetch":
                where = data.fetch(name, dest=args.dest, mirror=args.mirror, force=args.force, log=print)
            else:
                where = data.locate(name, fetch_missing=False)
            print(f"{name}: verified in {where}")
    except data.DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def _add_data(sub) -> None:
    p = sub.add_parser("data", help="fetch and verify datasets (MNIST, Fashion-MNIST, a9a)")
    p.add_argument("action", choices=["fetch", "verify"])
    p.add_argument("--dataset", action="append", help="mnist (default), fashion-mnist or a9a; repeatable")
    p.add_argument("--dest", help="directory to fetch into (default data/<dataset>/)")
    p.add_argument(
        "--mirror", help="local directory or base URL (default $LABKIT_DATA_MIRROR, else the public mirrors)"
    )
    p.add_argument("--force", action="store_true", help="replace files already in place")
    p.set_defaults(func=_data)


def _add_bench(sub) -> None:
    from labkit import bench

    p = sub.add_parser("bench", help="run the benchmarks (ratios measured side by side) into out/bench/")
    p.add_argument("names", nargs="*", help=f"benchmarks to run (default: all of {', '.join(bench.BENCHMARKS)})")
    p.add_argument("--out", default="out/bench")
    p.add_argument("--quick", action="store_true", help="small sizes, to check that each benchmark runs")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per benchmark")
    p.set_defaults(func=lambda a: bench.run_all(a.names or list(bench.BENCHMARKS), Path(a.out), a.quick, a.timeout))


def _add_monitor(sub) -> None:
    def run(a):
        from labkit.measure import monitor

        if a.command_args and a.command_args[0] == "--":
            a.command_args = a.command_args[1:]
        try:
            return monitor.monitor_command(
                a.command_args or None,
                pid=a.pid,
                interval=a.interval,
                out=a.out,
                duration=a.duration,
                timeout=a.timeout,
                dstat=a.dstat,
            )
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2

    p = sub.add_parser(
        "monitor",
        help="sample CPU, memory, network and disk of a command or pid (replaces dstat)",
        description="python -m labkit monitor [options] -- CMD ...   or   --pid PID [--duration S]",
    )
    p.add_argument("command_args", nargs=argparse.REMAINDER, metavar="-- CMD ...", help="command to run and sample")
    p.add_argument("--pid", type=int, help="sample this running process (and its children) instead")
    p.add_argument("--duration", type=float, help="with --pid: stop after S seconds (default: when it exits)")
    p.add_argument("--interval", type=float, default=0.5, help="seconds between samples (default 0.5)")
    p.add_argument("--out", default="out/monitor", help="directory for monitor.csv/.json/.png (default out/monitor)")
    p.add_argument("--dstat", action="store_true", help="write monitor.csv in dstat's --output layout")
    p.add_argument("--timeout", type=float, default=3600, help="stop the command after S seconds (default 3600)")
    p.set_defaults(func=run)


def _instructor_only(exc: ModuleNotFoundError):
    """labkit.grading is not in the student kit (``make release``): say so, else re-raise."""
    if exc.name and exc.name.startswith("labkit.grading"):
        print("error: this is the student kit; grading and releasing are in the instructor's kit", file=sys.stderr)
        raise SystemExit(2) from None
    raise exc


# The grading commands import labkit.grading where they run (the student kit has none of it), each
# module by its own import statement, so that the import checks see what every command depends on.
# What they print is inert (``labkit.core.inert``): it shows students' names, reasons and file names.
def _grading_command(load, call):
    """A command's ``func``: ``load()`` imports its module of labkit.grading (the student kit's
    refusal if there is none), then ``call(module, args)`` runs with inert output."""

    def run(args) -> int:
        try:
            module = load()
        except ModuleNotFoundError as e:
            _instructor_only(e)
        with inert.console():
            return call(module, args)

    return run


def _load_grade():
    from labkit.grading import grade

    return grade


def _load_publish():
    from labkit.grading.gradebook import publish

    return publish


def _grade(entry: str):
    """``grade`` and ``grade-import``: the function ``entry`` of labkit.grading.grade."""
    return _grading_command(_load_grade, lambda grade, args: getattr(grade, entry)(args))


def _publish(action: str):
    """``grade-answers`` ... ``grade-export``: one ``main_<action>`` of labkit.grading.gradebook.publish,
    holding the output folder's lock."""
    return _grading_command(
        _load_publish, lambda publish, args: _locked(args, lambda: getattr(publish, f"main_{action}")(args))
    )


def _publish_parser(sub, action: str, help: str):
    """The parser of ``grade-<action>``, a command over a graded batch's folder (``--out``, locked
    while it writes), run by ``_publish(action)``; the command adds its own arguments to it."""
    p = sub.add_parser(f"grade-{action}", help=help)
    p.add_argument("--out", default="out/grade", help="the graded batch's output folder (default out/grade)")
    _lock_arguments(p)
    p.set_defaults(func=_publish(action))
    return p


def _locked(args, run) -> int:
    """``run()`` holding the lock of ``args.out`` (``folderlock``: one writer at a time). A folder
    with no graded batch is not locked (nor made): the command finds nothing there and says so."""
    from labkit.core import folderlock

    if not (Path(args.out) / ".grader").is_dir():
        return run()
    return folderlock.command(args.out, args.wait, run)


def _lock_arguments(p) -> None:
    """What a command does while another writes its output folder (``labkit.core.folderlock``)."""
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--wait",
        type=_seconds,
        metavar="SECONDS",
        help="while another command writes the output folder, wait at most this long for it, then refuse "
        "(exit 75; default: wait until it ends)",
    )
    g.add_argument(
        "--no-wait",
        dest="wait",
        action="store_const",
        const=0.0,
        help="while another command writes the output folder, refuse at once (exit 75), naming it",
    )


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give seconds, 0 or more")
    return value


def _release(args) -> int:
    try:
        from labkit.grading.kit import release
    except ModuleNotFoundError as e:
        _instructor_only(e)
    return release.main(args)


def _add_grade(sub) -> None:
    p = sub.add_parser("grade", help="run notebooks in isolation, check them against the rubric, write reports")
    p.add_argument(
        "submissions",
        nargs="?",
        help="folder of DIR/<student>/<lab notebook>.ipynb, or Canvas's "
        "'Download Submissions' zip, or Gradescope's export "
        "(default: the reference notebooks in --notebooks)",
    )
    p.add_argument(
        "--out",
        default=None,
        help="output folder; grading it again reruns only what changed (default "
        "out/grade for submissions, out/reference for the reference notebooks: "
        "a class's gradebook never holds the self-check)",
    )
    p.add_argument(
        "-j",
        "--jobs",
        type=int,
        default=None,
        help="notebooks run at a time (default: one per core, as many as memory holds)",
    )
    p.add_argument("--rubric", default="notebooks/rubric.toml")
    p.add_argument("--notebooks", default="notebooks", help="the reference notebooks' folder")
    p.add_argument(
        "--lab",
        action="append",
        help="grade only this lab (rubric key or notebook name); repeatable (default: the labs some student submitted)",
    )
    p.add_argument(
        "--roster",
        help="Canvas's gradebook export (Grades > Export): names the students of a download, "
        "lists who did not submit; kept for the exports",
    )
    p.add_argument(
        "--due",
        help="the due date, e.g. 2024-10-01T23:59-07:00 (no zone: this machine's): a Gradescope "
        "submission created after it is late (Canvas marks late files itself)",
    )
    p.add_argument(
        "--groups",
        help="Canvas's group set CSV (People > the group set > Import > Download Course Roster CSV), for a "
        "group assignment: each group's file is run once and credited to every member",
    )
    p.add_argument(
        "--student",
        metavar="NAME",
        help="regrade this one student (folder name or the reports' name): their notebooks run again, "
        "everyone else's runs stay as they are",
    )
    p.add_argument(
        "--no-sandbox",
        action="store_true",
        help="run students' notebooks without the bubblewrap sandbox, trusting each with everything "
        "you can reach (every report says so)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="run every notebook again (default: only those whose submission, rubric or grader changed, "
        "or whose last run did not end)",
    )
    p.add_argument(
        "--slurm",
        metavar="PARTITION",
        help="run each notebook as a job of a Slurm job array in "
        "PARTITION (-j is then Slurm's to decide; docs/cluster.md)",
    )
    p.add_argument(
        "--slurm-args",
        default="",
        help="more sbatch arguments, with '=' and quoted: --slurm-args='--cpus-per-task=2 --exclude=node7'",
    )
    p.add_argument(
        "--similar",
        type=float,
        metavar="SHARE",
        help="similarity.html flags pairs sharing at least this share of the smaller notebook's "
        "fingerprints (default 0.5); it never changes points",
    )
    _lock_arguments(p)
    p.set_defaults(func=_grade("main"))

    p = _publish_parser(
        sub,
        "answers",
        help="per analysis question, an HTML page and a CSV of every student's answer for the TAs (into OUT/answers/)",
    )
    p.add_argument(
        "--anonymous",
        action="store_true",
        help="show students as codes (the key stays in OUT/.grader/anonymous.csv); merging maps them back",
    )

    p = _publish_parser(sub, "merge", help="merge the TAs' filled-in answer CSVs; rebuilds every report, runs nothing")
    p.add_argument("files", nargs="+", help="CSV files grade-answers wrote, with score (and comment) filled in")
    p.add_argument(
        "--prefer",
        metavar="FILE",
        help="one of the files: it wins every conflict it is part of (two "
        "files disagreeing, or a score changed since it was exported)",
    )

    p = sub.add_parser(
        "grade-import",
        help="lay out Canvas's or Gradescope's download as DIR/<student>/<notebook>"
        ".ipynb with intake.json (grade does this itself; this is to look first)",
    )
    p.add_argument("download", help="Canvas's 'Download Submissions' zip or Gradescope's export (zip or folder)")
    p.add_argument("--into", required=True, help="the folder to write (replaced if an import wrote it)")
    p.add_argument("--rubric", default="notebooks/rubric.toml")
    p.add_argument("--notebooks", default="notebooks", help="the reference notebooks' folder (matches misnamed files)")
    p.add_argument("--roster", help="Canvas's gradebook export: names each student as the gradebook does")
    p.add_argument("--due", help="the due date (ISO 8601): a Gradescope submission created after it is late")
    p.add_argument("--groups", help="Canvas's group set CSV: each group's file is laid out for every member")
    p.set_defaults(func=_grade("main_import"))

    _publish_parser(
        sub,
        "deliver",
        help="pack the feedback pages: one zip per student, and per lab a zip for "
        "Canvas's Re-Upload Submissions (into OUT/deliver/)",
    )

    p = _publish_parser(sub, "export", help="write final_grades.csv and canvas.csv (Canvas's gradebook import)")
    p.add_argument(
        "--roster",
        help="Canvas's gradebook export (Grades > Export): students are matched by "
        "SIS Login ID, SIS User ID or ID; kept for later merges",
    )
    p.add_argument(
        "--column",
        action="append",
        metavar="LAB=NAME",
        help="a lab's column as Canvas names the assignment, e.g. lab1='Lab 1 (12345)'; repeatable",
    )
    p.add_argument(
        "--new-assignment",
        action="store_true",
        help="accept a column that is not an assignment of the roster: Canvas creates a new assignment "
        "for it (default: refused)",
    )
    p.add_argument(
        "--scale-to-canvas",
        action="store_true",
        help="a lab worth other points in Canvas (the roster's Points Possible) than in the rubric: scale its "
        "scores to Canvas's points (default: refused, naming both); kept for later merges until either changes",
    )


def _add_release(sub) -> None:
    p = sub.add_parser(
        "release",
        help="the student kit (notebooks and package without solutions, its own README, "
        "Makefile and public rubric) into --out",
    )
    p.add_argument("--out", default="release")
    p.add_argument("--notebooks", default="notebooks", help="the reference notebooks and their rubric.toml")
    p.add_argument(
        "--public-rubric",
        metavar="FILE",
        help="write only the public rubric, to FILE (what make check runs the notebooks with)",
    )
    p.set_defaults(func=_release)


def _add_canary(sub) -> None:
    def run(a):
        from labkit.grading.kit import canary

        root = Path(__file__).resolve().parent.parent
        baseline = Path(a.baseline) if a.baseline else None
        return canary.run(root, Path(a.out), baseline, a.tolerance, a.timeout)

    p = sub.add_parser(
        "canary",
        help="grade the reference notebooks in a scratch venv with the newest TensorFlow, Keras and "
        "papermill, beside the course's pins; report what changed or broke (the course's venv is untouched)",
    )
    p.add_argument("--out", default="out/canary", help="the scratch venv, both gradings and report.md")
    p.add_argument("--baseline", help="a reference grading already made with the course's pins (e.g. out/reference)")
    p.add_argument("--tolerance", type=float, default=0.25, help="relative change of a record to report (0.25)")
    p.add_argument("--timeout", type=float, default=3600, help="seconds for each install and each grading")
    p.set_defaults(func=run)


def _add_papermill(sub) -> None:
    """Listed in ``--help`` only: ``main`` hands its arguments to papermill before parsing any."""
    sub.add_parser(
        "papermill",
        help="papermill's command line (run a lab headless: NOTEBOOK OUTPUT -p NAME VALUE ...), "
        "but a dead kernel ends it with 1 and its cause, not papermill's 138",
    )


def _add_check(sub) -> None:
    def run(a):
        from labkit.notebook import checking

        return checking.main(a)

    p = sub.add_parser(
        "check",
        help="run lab notebooks as the grader will, before you submit them, and say what is missing (make check)",
    )
    p.add_argument(
        "files", nargs="*", metavar="NOTEBOOK", help="notebooks to check (default: each lab's notebook in --notebooks)"
    )
    p.add_argument("--lab", action="append", help="check this lab: its number, key or notebook name; repeatable")
    p.add_argument("--rubric", default="notebooks/rubric.toml", help="the public rubric (make release writes it)")
    p.add_argument("--notebooks", default="notebooks", help="the labs' folder (default notebooks)")
    p.add_argument("--out", default="out/check", help="where each lab's run goes (default out/check/<lab>/)")
    p.set_defaults(func=run)


def _spec_arguments(p) -> None:
    p.add_argument("--mode", help="a deploy mode from the reports: single, cluster, cluster2, cs744")
    p.add_argument("--hosts", help="hosts file (one host per line; /etc/hosts-style lines work); default 127.0.0.1")
    p.add_argument("--ps", type=int, default=1, help="parameter servers (default 1)")
    p.add_argument("--workers", type=int, help="workers (default: one per host, or 2 on 127.0.0.1)")
    p.add_argument("--chief", action="store_true", help="add a chief job")


def _launcher_arguments(p) -> None:
    _remote_arguments(p)
    p.add_argument(
        "--launcher",
        help="how tasks start: local, ssh or slurm (default $LABKIT_LAUNCHER, else Slurm "
        "inside an allocation without --hosts, else by host: here or over ssh)",
    )
    p.add_argument("--args", default="", help="the program's own arguments, quoted: --args '--steps 300'")


def _remote_arguments(p) -> None:
    from labkit.distributed.launchers.ssh import CONNECT, DEFAULT_SSH, LIVENESS

    p.add_argument(
        "--ssh",
        help=f"ssh command for remote hosts (default $LABKIT_SSH, else '{' '.join(DEFAULT_SSH)}'); "
        f"the kit's liveness options '{' '.join(LIVENESS)}' go first in any ssh command, so a "
        f"node whose link drops is noticed in about 15 s; '{' '.join(CONNECT)}' follows them unless the "
        f"command sets its own",
    )
    p.add_argument("--remote-dir", help="the kit's directory on remote hosts (default $LABKIT_REMOTE_DIR, else labkit)")
    p.add_argument(
        "--remote-python", default=".venv/bin/python", help="python on remote hosts, relative to --remote-dir"
    )


def _launcher(args, program: str, **kwargs):
    import shlex

    from labkit.wire import spec as cluster
    from labkit.distributed import launch

    spec = cluster.build(args.mode, args.hosts, ps=args.ps, workers=args.workers, chief=args.chief)
    ssh = {
        "ssh": shlex.split(args.ssh) if args.ssh else None,
        "remote_dir": args.remote_dir,
        "remote_python": args.remote_python,
    }
    c = launch.Cluster(
        spec,
        program,
        program_argv=shlex.split(args.args),
        launcher=args.launcher,
        launcher_options={k: v for k, v in ssh.items() if v is not None},
        **kwargs,
    )
    return c.spec, c  # as the launcher placed it (Slurm: on the allocation's nodes)


def _cluster(args) -> int:
    try:
        spec, launcher = _launcher(args, args.program, dry_run=True)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(spec.table() + "\n")
    for t in spec.tasks():
        print(f"TF_CONFIG for {t.name}: {spec.tf_config(t.type, t.index)}")
    if args.print_commands:
        print()
        launcher.print_commands()
    return 0


def _add_cluster(sub) -> None:
    p = sub.add_parser(
        "cluster", help="print a cluster spec, each task's TF_CONFIG and (optionally) the exact command each node runs"
    )
    _spec_arguments(p)
    p.add_argument("--print-commands", action="store_true", help="print each task's command, ready to paste")
    p.add_argument("--program", default="ps_sgd", help="task program for --print-commands (default ps_sgd)")
    _launcher_arguments(p)
    p.set_defaults(func=_cluster)


def _run(args) -> int:
    from labkit.distributed import launch

    try:
        spec, launcher = _launcher(args, args.program, lab=args.lab, timeout=args.timeout, dry_run=args.print_commands)
        if args.print_commands:
            launcher.print_commands()
            return 0
        print(spec.table() + "\n", flush=True)
        result = launcher.run()
    except (ValueError, launch.TaskFailed, launch.ClusterTimeout, launch.VersionSkew) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    with __import__("pandas").option_context("display.width", 200, "display.max_columns", 30):
        print(result.table().to_string())
    print(
        f"\nstart-up {result.startup_s:.1f} s, teardown {result.teardown_s:.2f} s; logs and results in {result.run_dir}"
    )
    return 0


def _add_run(sub) -> None:
    p = sub.add_parser("run", help="run a task program on a cluster and print the per-task table")
    p.add_argument("program", help="labkit.tasks program (e.g. ps_sgd) or a dotted module name")
    _spec_arguments(p)
    p.add_argument("--lab", default="adhoc", help="run directory: runs/LAB/<program>-<time>/")
    p.add_argument("--timeout", type=float, default=900, help="seconds before everything is stopped")
    p.add_argument("--print-commands", action="store_true", help="print each task's command and start nothing")
    _launcher_arguments(p)
    p.set_defaults(func=_run)


def _nodes(args) -> int:
    import shlex

    from labkit.distributed import launch, nodes

    remote = dict(
        ssh=shlex.split(args.ssh) if args.ssh else None, remote_dir=args.remote_dir, remote_python=args.remote_python
    )
    try:
        if args.action == "setup":
            nodes.setup(
                args.hosts,
                install=args.install,
                datasets=args.dataset or nodes.DEFAULT_DATASETS,
                data_mirror=args.data_mirror,
                copy=not args.no_copy,
                keep=args.keep,
                **remote,
            )
        elif args.action == "check":
            nodes.check(args.hosts, **remote)
        else:
            for path in nodes.resource_csvs(args.run_dir, args.out, dstat=args.dstat):
                print(path)
    except (ValueError, nodes.NodeError, launch.VersionSkew) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def _add_nodes(sub) -> None:
    p = sub.add_parser(
        "nodes",
        help="prepare a cluster's nodes over ssh (copy, install, data, versions), check "
        "them, or write a finished run's per-node resource CSVs (docs/cluster.md)",
    )
    p.add_argument("action", choices=["setup", "check", "csv"])
    p.add_argument("run_dir", nargs="?", help="csv: the run directory (runs/<lab>/<run>)")
    p.add_argument("--hosts", help="setup/check: hosts file (one host per line)")
    p.add_argument(
        "--install",
        default="make setup",
        help="setup: install command run in the kit's directory (default 'make setup')",
    )
    p.add_argument("--dataset", action="append", help="setup: datasets to fetch (default mnist and a9a); repeatable")
    p.add_argument(
        "--data-mirror",
        help="setup: where the nodes fetch data from: a directory every node mounts "
        "or a URL (default: the public mirrors)",
    )
    p.add_argument("--no-copy", action="store_true", help="setup: the kit is already there (e.g. git clone)")
    p.add_argument(
        "--keep",
        action="append",
        default=[],
        metavar="FOLDER",
        help="setup: a folder of the kit (notebooks: the students') whose files a node has are left as they "
        "are; only the ones it lacks are copied (repeatable)",
    )
    p.add_argument("--out", default="out/nodes", help="csv: output folder (default out/nodes)")
    p.add_argument("--dstat", action="store_true", help="csv: dstat's --output layout")
    _remote_arguments(p)

    def run(a):
        if a.action == "csv" and not a.run_dir:
            p.error("csv needs the run directory: python -m labkit nodes csv runs/<lab>/<run>")
        if a.action != "csv" and not a.hosts:
            p.error(f"{a.action} needs --hosts FILE (one host per line; see docs/cluster.md)")
        return _nodes(a)

    p.set_defaults(func=run)


def _add_cloudlab_local(sub) -> None:
    def run(a):
        from labkit.infra import cloudlab_local, minislurm, netem

        try:
            return cloudlab_local.session(a.nodes, a.link, a.user, a.command, slurm=a.slurm, shared_home=a.shared_home)
        except (ValueError, netem.EmulationUnavailable, netem.NetworkSetupError, minislurm.SlurmStartError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1

    p = sub.add_parser(
        "cloudlab-local",
        help="emulated CloudLab nodes on this machine (network namespaces on a "
        "shaped LAN, sshd, an account): a shell on node0 (docs/cluster.md)",
    )
    p.add_argument("--nodes", type=int, default=4, help="how many nodes: node0, node1, ... (default 4)")
    p.add_argument("--link", default="1gbit", help="each node's link: RATE[,DELAY], e.g. 1gbit,0.2ms (default 1gbit)")
    p.add_argument("--user", default="ta", help="the experiment's account on every node (default ta)")
    p.add_argument("--command", help="run this on node0 as the account instead of a shell, then take all down")
    p.add_argument(
        "--slurm",
        action="store_true",
        help="with a Slurm across the nodes (slurmctld on node0, a "
        "slurmd on each) and the account's home shared by them",
    )
    p.add_argument(
        "--shared-home",
        action="store_true",
        help="the account's home one folder on every node, as an NFS home is (--slurm has it too)",
    )
    p.set_defaults(func=run)


# Each entry adds one subcommand; they are listed in the order `--help` shows them.
REGISTRARS = [
    _add_data,
    _add_cluster,
    _add_run,
    _add_nodes,
    _add_cloudlab_local,
    _add_check,
    _add_papermill,
    _add_bench,
    _add_monitor,
    _add_grade,
    _add_release,
    _add_canary,
]
# Registrars whose subcommands live in a subpackage the student kit (make release) leaves out: they
# are registered only where that subpackage is present.
NEEDS = {
    _add_bench: "labkit.bench",
    _add_grade: "labkit.grading",
    _add_release: "labkit.grading",
    _add_canary: "labkit.grading",
}


def build_parser() -> argparse.ArgumentParser:
    from importlib.util import find_spec

    parser = argparse.ArgumentParser(
        prog="python -m labkit", description="labkit: distributed TensorFlow labs, measured"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in REGISTRARS:
        if add not in NEEDS or find_spec(NEEDS[add]) is not None:
            add(sub)
    return parser


def main(argv=None) -> int:
    """Run one subcommand. SIGTERM and SIGHUP stop it as Ctrl-C does, with everything it
    started (``proc.unwind_on_signals``); output into a closed pipe (``... | head``) ends it
    quietly, as it ends ``cat``."""
    from labkit.core.proc import unwind_on_signals

    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["papermill"]:  # papermill's own options, --help among them, passed through untouched
        from labkit.notebook import headless

        unwind_on_signals()
        return headless.main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    unwind_on_signals()
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # here, not at exit: output shorter than the buffer meets a closed pipe only now
        return code
    except BrokenPipeError:
        # nobody reads stdout any more: point it at /dev/null, so that the flush at exit cannot fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a command that lost its reader
