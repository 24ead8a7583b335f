"""Records survive execution: written as display outputs, read back with nbformat."""
import nbformat
import numpy as np
import pandas as pd
import pytest
from nbclient import NotebookClient

from labkit.record import MIME, read_records, to_jsonable


def test_to_jsonable_converts_numpy_pandas_and_nonfinite():
    frame = pd.DataFrame({"workers": [1, 2], "acc": [np.float32(0.5), np.nan]})
    assert to_jsonable(frame) == [{"workers": 1, "acc": 0.5}, {"workers": 2, "acc": None}]
    assert to_jsonable({"a": np.int64(3), "b": np.arange(2)}) == {"a": 3, "b": [0, 1]}
    with pytest.raises(TypeError, match="not JSON-able"):
        to_jsonable(object())


def test_record_round_trip_through_a_kernel(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("import numpy as np\nfrom labkit import record\n"
                                  "record('accuracy', np.float32(0.925))\nrecord('steps', [3, 3, 4])"),
        nbformat.v4.new_code_cell("record('accuracy', 0.93)  # the last record of a name wins"),
    ]
    NotebookClient(nb, timeout=60, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    path = tmp_path / "executed.ipynb"
    nbformat.write(nb, path)
    assert read_records(path) == {"accuracy": 0.93, "steps": [3, 3, 4]}
    outputs = [o for c in nb.cells for o in c.outputs if MIME in o.get("data", {})]
    assert len(outputs) == 3 and "[labkit record] steps = [3, 3, 4]" in outputs[1]["data"]["text/plain"]
