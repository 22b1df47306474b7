"""The engine (scheduler/) imports nothing outside the Python standard library.

The same engine runs in the simulator and in the live system, so it must not depend on
Django, Celery, Redis or any other installed package.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
ENGINE_ROOT = REPO_ROOT / "scheduler"
ALLOWED_TOP_LEVEL = frozenset(sys.stdlib_module_names) | {"scheduler"}
DYNAMIC_IMPORTERS = frozenset({"import_module", "__import__"})
MIN_ENGINE_MODULES = 5


def engine_files() -> list[Path]:
    """Every Python source file of the engine package, in a stable order."""
    return sorted(ENGINE_ROOT.rglob("*.py"))


def imported_modules(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Yield (line, top-level module) for each absolute import, static or by a literal name."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.partition(".")[0]
        elif isinstance(node, ast.ImportFrom):
            # Relative imports (level > 0) stay inside the package.
            if node.level == 0 and node.module is not None:
                yield node.lineno, node.module.partition(".")[0]
        elif isinstance(node, ast.Call) and (name := _dynamic_import_name(node)) is not None:
            yield node.lineno, name.partition(".")[0]


def _dynamic_import_name(call: ast.Call) -> str | None:
    """The module named by importlib.import_module("x") or __import__("x"), if it is literal."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name not in DYNAMIC_IMPORTERS or not call.args:
        return None
    first = call.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value
    return None


def test_engine_package_is_present() -> None:
    files = engine_files()
    assert len(files) >= MIN_ENGINE_MODULES, (
        f"expected at least {MIN_ENGINE_MODULES} modules under {ENGINE_ROOT}, found {len(files)}"
    )


def test_engine_imports_only_the_standard_library() -> None:
    files = engine_files()
    violations = []
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, module in imported_modules(tree):
            if module not in ALLOWED_TOP_LEVEL:
                violations.append(f"{path.relative_to(REPO_ROOT)}:{line} imports {module!r}")
    assert len(files) >= MIN_ENGINE_MODULES, f"only {len(files)} modules under {ENGINE_ROOT}"
    message = "scheduler/ must use the standard library only:\n" + "\n".join(violations)
    assert not violations, message
