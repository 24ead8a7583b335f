"""``python -m labkit papermill``: papermill's own command line, every option as papermill has it,
for running a lab headless on a cluster (docs/cluster.md), with its ends said plainly.

Papermill exits with 138 when the kernel dies (killed by the kernel's OOM killer, or by a person):
its own code for a dead kernel, which a shell and Slurm read as a signal (128 + SIGUSR1). Here that
is 1 with the cause and what to do, and a cell that raised is 1 with the cell, the error and where
the executed notebook (with the traceback) is. A ``-p`` that papermill would pass as text where the
notebook's parameter is a list or a dict is refused before the run (2), with the ``-y`` to use."""

from __future__ import annotations

import sys

PAPERMILL_DEAD_KERNEL = 138  # papermill.cli's exit status for nbclient's DeadKernelError

DEAD_KERNEL = (
    "error: the notebook's kernel died mid-run: killed by the OOM killer or by a person, not by an error "
    "of a cell. `sudo dmesg | grep -i oom` on this node says whether memory ran out; if it did, give the "
    "notebook less to hold (a smaller train_limit, fewer tasks on this node) and run it again"
)


def text_for_a_collection(argv: list[str]) -> str | None:
    """The error for a ``-p NAME VALUE`` that papermill would pass as text where the notebook's
    parameter is a list or a dict (``-p workers '[1, 2]'``: the lab would meet the string
    ``"[1, 2]"`` cells later, as a TypeError far from its cause); None when there is none, or when
    papermill itself is to report the command line's mistake."""
    import click
    import papermill
    from papermill.cli import _resolve_type, papermill as command

    try:
        ctx = command.make_context("papermill", list(argv), resilient_parsing=True)
        notebook, given = ctx.params.get("notebook_path"), ctx.params.get("parameters") or ()
        if not notebook or notebook == "-" or not given:
            return None
        defaults = papermill.inspect_notebook(notebook)
    except (click.exceptions.ClickException, click.exceptions.Exit, OSError, ValueError):
        return None
    for name, value in given:
        default = str(defaults.get(name, {}).get("default", "")).lstrip()
        if default[:1] in ("[", "{") and isinstance(_resolve_type(value), str):
            kind = "list" if default.startswith("[") else "dict"
            return (
                f"error: -p {name} {value!r} passes text, but {name} is a {kind} in {notebook} (default "
                f"{default}); papermill's -p reads numbers, True, False and None, and anything else as text: "
                f"pass it as YAML, -y '{{{name}: {value}}}'"
            )
    return None


def main(argv: list[str]) -> int:
    """Run papermill's command on ``argv``; its exit status, except as the module docstring says."""
    import click
    from papermill.cli import papermill
    from papermill.exceptions import PapermillExecutionError

    wrong = text_for_a_collection(argv)
    if wrong:
        print(wrong, file=sys.stderr)
        return 2
    try:
        papermill.main(args=list(argv), prog_name="python -m labkit papermill", standalone_mode=False)
    except SystemExit as e:
        if e.code == PAPERMILL_DEAD_KERNEL:
            print(DEAD_KERNEL, file=sys.stderr)
            return 1
        return e.code if isinstance(e.code, int) else 1
    except click.exceptions.ClickException as e:  # a bad option: papermill's own message and status
        e.show()
        return e.exit_code
    except click.exceptions.Abort:
        return 1
    except PapermillExecutionError as e:
        output = argv[1] if len(argv) > 1 else "the output notebook"
        print(
            f"error: cell {e.exec_count} raised {e.ename}: {e.evalue}\nthe executed notebook, with the traceback, "
            f"is {output}",
            file=sys.stderr,
        )
        return 1
    return 0
