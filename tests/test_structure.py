"""The package's shape: no import cycles, and no module too long to read without a reason."""
from __future__ import annotations

import ast
import importlib.util

from llmzero_slurm.paths import ROOT

MAX_LINES = 300


def _cycle_script():
    spec = importlib.util.spec_from_file_location("import_cycles", ROOT / ".ci" / "import_cycles.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_package_has_no_import_cycles():
    assert _cycle_script().package_cycles(ROOT / "llmzero_slurm") == []


def test_the_cycle_finder_sees_every_kind_of_import(tmp_path):
    """A cycle through a function-level or TYPE_CHECKING import counts like any other."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from .sub.b import B\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import a\n")
    (pkg / "c.py").write_text("import pkg.sub.b\n")
    assert _cycle_script().package_cycles(pkg) == [["pkg.a", "pkg.sub.b"]]


def test_long_modules_say_why_in_their_docstring():
    """A module over MAX_LINES lines is hard to change safely; one that must be longer says
    why in a docstring line starting with 'Long:'."""
    long = []
    for path in sorted((ROOT / "llmzero_slurm").rglob("*.py")):
        text = path.read_text()
        if text.count("\n") > MAX_LINES:
            doc = ast.get_docstring(ast.parse(text)) or ""
            if not any(line.startswith("Long:") for line in doc.splitlines()):
                long.append(str(path.relative_to(ROOT)))
    assert long == []
