"""The student API is a contract: each notebook imports its lab's API and labkit's few names, the
API holds what the notebooks use and nothing they cannot reach, docs/student-api.md says the
same, and the names the previous release's notebooks import still work, with a warning."""

from __future__ import annotations

import ast
import importlib
import json
import re
import warnings
from pathlib import Path

import nbformat
import pytest

import labkit
from labkit import compat
from labkit.labs import api, names, stamp
from labkit.labs.surface import Surface, document, surface_of

REPO = Path(__file__).parents[2]
EARLIER = Path(__file__).parents[1] / "fixtures" / "release-0.1.0"


def notebook_labs() -> dict[str, Path]:
    from labkit.grading.judge.rubric import load_rubric

    labs = load_rubric(REPO / "notebooks" / "rubric.toml").labs
    return {key: lab.reference(REPO / "notebooks") for key, lab in labs.items()}


def code_of(path: Path) -> ast.Module:
    nb = nbformat.read(str(path), as_version=4)
    lines = [
        line
        for c in nb.cells
        if c.cell_type == "code"
        for line in c.source.splitlines()
        if not line.lstrip().startswith(("%", "!"))
    ]
    return ast.parse("\n".join(lines))


def imports_and_uses(tree: ast.Module) -> tuple[list[tuple[str, str, str]], dict[str, set[str]]]:
    """(module, name, bound alias) of every ``from labkit... import``, and the attributes used on each alias."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            assert not any(a.name.startswith("labkit") for a in node.names), ast.unparse(node)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("labkit"):
            found += [(node.module, a.name, a.asname or a.name) for a in node.names]
    aliases = {alias for _, _, alias in found}
    uses: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            uses.setdefault(node.value.id, set()).add(node.attr)
    return found, uses


@pytest.mark.parametrize("lab", sorted(notebook_labs()))
def test_a_notebook_imports_its_lab_api_and_labkit_names_only(lab):
    found, uses = imports_and_uses(code_of(notebook_labs()[lab]))
    declared = surface_of(api(lab))
    for module, name, alias in found:
        assert module in ("labkit", f"labkit.labs.{lab}"), f"{lab} imports {name} from {module}"
        assert name in (labkit.EXPORTS if module == "labkit" else declared), f"{module}.{name}"
        if module != "labkit" and declared[name][1]:  # a namespace: only its listed names are used
            assert uses.get(alias, set()) <= set(declared[name][1]), (lab, name, uses.get(alias))


@pytest.mark.parametrize("lab", sorted(notebook_labs()))
def test_the_api_lists_only_what_its_notebook_uses(lab):
    """Every listed name is used by the lab's notebook: the contract is no wider than the lab."""
    found, uses = imports_and_uses(code_of(notebook_labs()[lab]))
    imported = {name: alias for module, name, alias in found if module != "labkit"}
    for name, (_, attrs) in surface_of(api(lab)).items():
        assert name in imported, f"{lab}'s API exports {name}, which its notebook never imports"
        assert set(attrs) <= uses.get(imported[name], set()), (lab, name, set(attrs) - uses.get(imported[name], set()))


def test_every_lab_folder_is_a_lab_with_a_notebook():
    assert names() == sorted(notebook_labs())


@pytest.mark.tensorflow
def test_every_listed_name_resolves_to_the_kits_object():
    for lab in names():
        for name, (target, attrs) in surface_of(api(lab)).items():
            entry = getattr(api(lab), name)
            module, _, attr = target.partition(":")
            real = importlib.import_module(module)
            if attr:
                assert entry is getattr(real, attr)
            for a in attrs:
                assert getattr(entry, a) is getattr(real, a), f"{lab}.{name}.{a}"


def test_an_unlisted_name_says_where_the_list_is():
    s = Surface("labkit.measure.units", "table").bind("lab9", "units")
    assert "table" in dir(s)
    with pytest.raises(AttributeError, match=r"'units' of lab9 has no 'fmt_bytes'.*table.*student-api.md"):
        s.fmt_bytes
    with pytest.raises(AttributeError, match="exports"):
        api("lab1").not_a_name


def test_the_doc_is_the_declared_api():
    text = (REPO / "docs" / "student-api.md").read_text()
    table = re.search(r"<!-- BEGIN generated -->\n(.*)<!-- END generated -->", text, re.S)
    assert table and table.group(1) == document(), "regenerate it: python -m labkit.labs.surface"


# ---------------------------------------------------------------------------------------------
# Earlier releases


def resolve_with_warnings(module: str, name: str):
    """``from module import name`` as a notebook runs it, and the kit warnings it raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = getattr(importlib.import_module(module), name, None)
        if value is None:
            value = importlib.import_module(f"{module}.{name}")
    return value, [w for w in caught if issubclass(w.category, compat.KitDeprecationWarning)]


@pytest.mark.tensorflow
def test_the_previous_releases_names_work_and_moved_ones_warn():
    earlier = json.loads((EARLIER / "imports.json").read_text())
    for notebook, seen in earlier["notebooks"].items():
        for module, name in seen["imports"]:
            value, warned = resolve_with_warnings(module, name)
            for attr in seen["uses"].get(f"{module}.{name}", []):
                assert hasattr(value, attr), f"{notebook}: {module}.{name}.{attr} is gone"
            old = f"{module}.{name}"
            if old in compat.MOVED or module in compat.MOVED:
                assert warned and compat.MOVED.get(old, compat.MOVED.get(module)) in str(warned[0].message)
                assert "docs/student-api.md" in str(warned[0].message)
            else:
                assert not warned, f"{old} did not move, yet warned"


@pytest.mark.tensorflow
def test_names_of_the_kits_before_the_layers_work_with_a_warning():
    earlier = json.loads((EARLIER / "imports.json").read_text())["earlier"]
    for module, name in earlier:
        value, warned = resolve_with_warnings(module, name)
        assert value is not None, f"{module}.{name}"
        if module == "labkit" and name in compat.FLAT:
            assert warned and compat.FLAT[name] in str(warned[0].message)
            assert value is importlib.import_module(compat.FLAT[name])


def test_a_moved_module_is_the_same_object_under_both_names():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", compat.KitDeprecationWarning)
        old = importlib.import_module("labkit.launchers.netem")
    new = importlib.import_module("labkit.distributed.launchers.netns")
    assert old is new and new.__spec__.name == "labkit.distributed.launchers.netns"


def test_the_stamp_is_read_and_a_forged_one_decides_nothing():
    nb = nbformat.v4.new_notebook()
    assert stamp.written_for(nb) == stamp.UNSTAMPED
    stamp.stamp(nb)
    assert stamp.written_for(nb) == labkit.__version__ and stamp.note(labkit.__version__) == ""
    nb.metadata["labkit"] = {"version": "<script>9"}
    assert stamp.written_for(nb) == "unreadable" and stamp.note("unreadable") == ""
    assert stamp.note(stamp.UNSTAMPED) == ""  # no stamp, no guess
    assert "written against labkit 0.1.0, graded by labkit " + labkit.__version__ in stamp.note("0.1.0")


def test_the_release_stamps_each_notebook(tmp_path):
    from labkit.grading.kit.release import release

    for path, _ in release(REPO / "notebooks", tmp_path / "kit", log=lambda m: None):
        nb = nbformat.read(str(path), as_version=4)
        assert nb.metadata["labkit"] == stamp.current(), path.name
