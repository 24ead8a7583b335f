"""The lab tests' shared runs: a lab's notebook executed at given parameters once a run, so the
tests that read one run (its records, its figures, its runs folder) each stay small."""

import hashlib
import json

import nbformat
import pytest

from helpers import once_per_run, run_notebook
from labkit.notebook.record import read_records


@pytest.fixture(scope="session")
def executed():
    """``executed(notebook, parameters, timeout)`` -> (executed notebook, records, its workdir):
    run under papermill once a run for that notebook's bytes and those parameters, whichever test
    (or xdist worker) asks first; ``timeout`` is each cell's."""

    def run(notebook, parameters: dict, timeout: float):
        key = hashlib.sha256(notebook.read_bytes() + json.dumps(parameters, sort_keys=True).encode()).hexdigest()
        folder = once_per_run(f"{notebook.stem}-{key[:12]}", lambda f: run_notebook(notebook, f, parameters, timeout))
        nb = nbformat.read(folder / "out.ipynb", as_version=4)
        return nb, read_records(nb), folder

    return run
