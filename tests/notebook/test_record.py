"""Records survive execution: written as display outputs, read back with nbformat."""

import nbformat
import numpy as np
import pandas as pd
import pytest
from nbclient import NotebookClient

from labkit.notebook.record import MIME, read_records, to_jsonable


def test_to_jsonable_converts_numpy_pandas_and_nonfinite():
    frame = pd.DataFrame({"workers": [1, 2], "acc": [np.float32(0.5), np.nan]})
    assert to_jsonable(frame) == [{"workers": 1, "acc": 0.5}, {"workers": 2, "acc": None}]
    assert to_jsonable({"a": np.int64(3), "b": np.arange(2)}) == {"a": 3, "b": [0, 1]}
    with pytest.raises(TypeError, match="not JSON-able"):
        to_jsonable(object())


@pytest.mark.kernel
def test_record_round_trip_through_a_kernel(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "import numpy as np\nfrom labkit import record\n"
            "record('accuracy', np.float32(0.925))\nrecord('steps', [3, 3, 4])"
        ),
        nbformat.v4.new_code_cell("record('accuracy', 0.93)  # the last record of a name wins"),
    ]
    NotebookClient(nb, timeout=60, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    path = tmp_path / "executed.ipynb"
    nbformat.write(nb, path)
    assert read_records(path) == {"accuracy": 0.93, "steps": [3, 3, 4]}
    outputs = [o for c in nb.cells for o in c.outputs if MIME in o.get("data", {})]
    assert len(outputs) == 3 and "[labkit record] steps = [3, 3, 4]" in outputs[1]["data"]["text/plain"]


def test_only_code_cells_hold_records_and_what_a_file_carries_is_named():
    from labkit.notebook.record import named_cells, pre_baked

    out = nbformat.v4.new_output("display_data", data={MIME: {"name": "acc", "value": 0.99}, "text/plain": "acc"})
    code = nbformat.v4.new_code_cell("x = 1", outputs=[out])
    md = nbformat.v4.new_markdown_cell("results", id="md-results")
    pasted = nbformat.v4.new_markdown_cell(f'{{"{MIME}": {{"name": "acc", "value": 1.0}}}}')
    bad = nbformat.v4.new_code_cell(
        "y = 2", outputs=[nbformat.v4.new_output("display_data", data={MIME: {"value": 3}, "text/plain": "no name"})]
    )
    nb = nbformat.v4.new_notebook(cells=[md, pasted, code, bad])
    md["outputs"] = [out]  # not valid nbformat, but a student's file may say anything
    assert read_records(nb) == {"acc": 0.99}  # the Markdown cell's copy and the nameless payload are skipped
    del nb.cells[2]
    assert read_records(nb) == {}
    # cells numbered as JupyterLab shows them, from 1 (record.cell_name)
    assert pre_baked(nb) == [
        "cell 1 (markdown): outputs in a non-code cell",
        "cell 2 (markdown): a record pasted into its text",
        "cell 3: 1 stored output(s)",
    ]
    assert named_cells(nb, "md-results") == [md]


def test_lookup_reads_paths_into_records():
    from labkit.notebook.record import Missing, lookup

    recs = {"h": {"acc": [0.1, 0.5]}, "a.b": 3, "n": None}
    assert lookup(recs, "h.acc.-1") == 0.5 and lookup(recs, "a.b") == 3
    for ref, msg in [("h.loss", "no 'loss'"), ("zz", "not found"), ("n", "null"), ("h.acc.5", "no '5'")]:
        with pytest.raises(Missing, match=msg):
            lookup(recs, ref)
