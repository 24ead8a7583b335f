"""The suite's own layout: no test file imports another. What several test files share lives in a
helper module named for what it builds (``_class.py``, ``_lms.py``, ``helpers.py``, ...), so each
test file runs alone, and moving or renaming one breaks no other. A script a test runs in another
process counts too: its imports are read from the test's string constants."""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
SCRIPT_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+import\b|import\s+([\w., ]+))", re.MULTILINE)


def imported_test_modules(source: str) -> list[str]:
    """The test modules (``test_*``) ``source`` imports, in its code or in a script held in a string."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(node.module)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            for module, names in SCRIPT_IMPORT.findall(node.value):
                found += [module] if module else [n.strip().split(" ")[0] for n in names.split(",")]
    return sorted({m for m in found if m.split(".")[0].startswith("test_")})


def test_the_check_finds_an_import_in_code_and_in_a_script():
    source = (  # written with {t} for test_, or this file would import what it shows
        "import os, {t}a\nfrom {t}b import x\n"
        "def f():\n    from {t}c import y\n"
        "SCRIPT = '''\nimport sys\nfrom {t}d import z\n'''\n"
        "from _class import alpha\nimport helpers\n"
    ).format(t="test_")
    assert imported_test_modules(source) == ["test_a", "test_b", "test_c", "test_d"]


def test_no_test_file_imports_another():
    files = sorted(TESTS.rglob("*.py"))
    assert len(files) > 50
    found = {
        f.relative_to(TESTS).as_posix(): imported for f in files if (imported := imported_test_modules(f.read_text()))
    }
    assert found == {}, (
        f"{found}: a test file imports another test file; move what they share to a helper module named "
        f"for what it builds (tests/_<name>.py) and import it from there"
    )
