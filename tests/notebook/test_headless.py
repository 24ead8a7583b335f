"""``python -m labkit papermill``: papermill's command line, whose ends say what happened. A dead
kernel is 1 with its cause (papermill's own status, 138, reads as a signal), a cell that raised is 1
with the cell and the error, and papermill's options and parameters are papermill's."""

import subprocess
import sys

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from labkit.notebook.headless import DEAD_KERNEL

pytestmark = pytest.mark.notebook


def _notebook(path, *sources):
    nb = new_notebook(cells=[new_code_cell(s) for s in sources])
    nb.cells[0].metadata["tags"] = ["parameters"]
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, str(path))
    return path


def _papermill(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "labkit", "papermill", *map(str, args)], capture_output=True, text=True, timeout=300
    )


def test_a_dead_kernel_is_one_with_its_cause(tmp_path):
    nb = _notebook(tmp_path / "in.ipynb", "x = 1", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
    done = _papermill(nb, tmp_path / "out.ipynb")
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    assert done.stderr.rstrip().endswith(DEAD_KERNEL) and "DeadKernelError" in done.stderr


def test_a_cell_that_raises_is_one_with_the_cell_and_the_error(tmp_path):
    nb = _notebook(tmp_path / "in.ipynb", "x = 1", "raise ValueError(f'boom {x}')")
    done = _papermill(nb, tmp_path / "out.ipynb", "-p", "x", "7")
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    assert f"raised ValueError: boom 7\nthe executed notebook, with the traceback, is {tmp_path / 'out.ipynb'}" in (
        done.stderr
    )


def test_papermills_parameters_and_a_clean_run(tmp_path):
    nb = _notebook(tmp_path / "in.ipynb", "x = 1", "print('x is', x)")
    done = _papermill(nb, tmp_path / "out.ipynb", "-p", "x", "5", "--no-progress-bar")
    assert done.returncode == 0, done.stderr[-2000:]
    out = nbformat.read(str(tmp_path / "out.ipynb"), as_version=4)
    assert out.cells[-1].outputs[0]["text"] == "x is 5\n"
    assert _papermill("--no-such-option").returncode == 2  # papermill's own usage error


def test_a_list_given_as_text_is_refused_before_the_run_with_the_yaml_to_use(tmp_path):
    nb = _notebook(tmp_path / "in.ipynb", "workers = [1, 2, 3]  # worker counts\nname = 'x'", "print(max(workers))")
    done = _papermill(nb, tmp_path / "out.ipynb", "-p", "workers", "[1, 2]", "-p", "name", "y")
    assert done.returncode == 2 and not (tmp_path / "out.ipynb").exists(), done.stderr[-2000:]
    assert "-p workers '[1, 2]' passes text, but workers is a list" in done.stderr
    assert "-y '{workers: [1, 2]}'" in done.stderr
    done = _papermill(nb, tmp_path / "out.ipynb", "-y", "{workers: [1, 2]}", "-p", "name", "y", "--no-progress-bar")
    assert done.returncode == 0, done.stderr[-2000:]
    out = nbformat.read(str(tmp_path / "out.ipynb"), as_version=4)
    assert out.cells[-1].outputs[0]["text"] == "2\n"  # the list the YAML gave, and text stays text
