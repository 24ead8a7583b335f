"""The test suite's own helpers: what they report when the thing they check does not hold."""
import nbformat
import pytest

import _netem_labs as netem_labs
from labkit import netem


def _notebook(section_output: str):
    cell = nbformat.v4.new_code_cell("netem_section()")
    cell.id = "lab2-netem-run"
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=section_output)]
    return nbformat.v4.new_notebook(cells=[cell])


def test_a_lab_section_on_emulated_links_skips_with_the_reason_where_links_cannot_be_emulated(monkeypatch):
    monkeypatch.setattr(netem, "availability", lambda link=None: (None, "no CAP_NET_ADMIN and no user namespaces"))
    said = _notebook("skipped: cannot emulate network links here: no CAP_NET_ADMIN and no user namespaces.")
    with pytest.raises(pytest.skip.Exception, match="lab2-netem.*not checked: no CAP_NET_ADMIN and no user"):
        netem_labs.check_lab2(said, {})
    with pytest.raises(AssertionError, match="lab2-netem: neither ran nor said why it skipped"):
        netem_labs.check_lab2(_notebook("done"), {})
