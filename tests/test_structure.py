"""The package's shape: no import cycles, and no module too long to read without a reason."""
from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys

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


IMPORT_NAMES = {"PIL": "pillow", "yaml": "pyyaml"}   # where a package's import name differs


def test_every_package_the_login_node_modules_import_is_declared():
    """agents/deadline.py imported httpx2 and agents/llm.py PIL, packages only others brought
    (the SDKs from anthropic 1.0 and openai 3.0 on, matplotlib), so a release the declared
    ranges admitted broke the login-node install. Every module-level import outside cputrain
    (the cpu extra's trainer) is a package install_requires names."""
    from setuptools.config.setupcfg import read_configuration
    declared = {re.split(r"[<>=!~ ;\[]", r, maxsplit=1)[0].lower()
                for r in read_configuration(ROOT / "setup.cfg")["options"]["install_requires"]}
    imported = {}
    for path in sorted((ROOT / "llmzero_slurm").rglob("*.py")):
        if "cputrain" in path.parts:
            continue
        for node in ast.parse(path.read_text()).body:
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.module
                     and not node.level else [])
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "llmzero_slurm":
                    imported.setdefault(IMPORT_NAMES.get(top, top).lower(), path.name)
    assert {k: v for k, v in imported.items() if k not in declared} == {}


def test_llmzero_status_imports_neither_the_llm_clients_nor_matplotlib():
    """Every llmzero-status imported the anthropic and openai SDKs and matplotlib (through
    the report package and the monitor's module), 3 s and 110 MB of its 4.4 s and 150 MB on a
    2-core login node: run under `watch` by many users, that was most of their load. It reads
    the run only; those load in the commands and jobs that draw or ask an LLM."""
    code = ("import sys, llmzero_slurm.cli.status, llmzero_slurm.cli.common; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'anthropic', 'openai', 'matplotlib', 'PIL'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"
