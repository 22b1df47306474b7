"""The layers' imports point one way (docs/architecture.md, The shell): the services and
the cycle never depend on the web pages, so an API call or a report does not load the
pages' code, and the pages can change without touching what the API computes."""

from __future__ import annotations

import ast
from pathlib import Path

import quotaweb

PACKAGE = Path(str(quotaweb.__file__)).parent
BELOW_THE_WEB = ("services", "scheduling", "models")


def _imported(path: Path) -> set[str]:
    """Absolute names of the modules `path` imports, relative imports resolved."""
    parts = ["quotaweb", *path.relative_to(PACKAGE).with_suffix("").parts]
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = parts[:len(parts) - node.level] if node.level else []
            module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_the_services_cycle_and_models_do_not_import_the_web_layer() -> None:
    checked = 0
    for layer in BELOW_THE_WEB:
        for path in sorted((PACKAGE / layer).rglob("*.py")):
            web = {name for name in _imported(path)
                   if name == "quotaweb.web" or name.startswith("quotaweb.web.")}
            assert not web, f"{path.relative_to(PACKAGE)} imports {sorted(web)}"
            checked += 1
    assert checked > 20


# The executors and the cycle (docs/architecture.md, Executors): the cycle asks the
# executor interface, the executors report through the attempts' single compare-and-swap,
# and no import inside a function hides a circle between them.
EXECUTORS_AND_CYCLE = ("executors", "scheduling")


def _module_name(path: Path) -> str:
    parts = ["quotaweb", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _function_level_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import | ast.ImportFrom):
                    found.append(f"{node.name} (line {inner.lineno})")
    return found


def test_the_executors_and_the_cycle_import_nothing_inside_functions() -> None:
    checked = 0
    for layer in EXECUTORS_AND_CYCLE:
        for path in sorted((PACKAGE / layer).rglob("*.py")):
            hidden = _function_level_imports(path)
            assert not hidden, f"{path.relative_to(PACKAGE)} imports inside {hidden}"
            checked += 1
    assert checked > 20


def test_the_executors_and_the_cycle_import_each_other_without_a_circle() -> None:
    paths = [path for layer in EXECUTORS_AND_CYCLE for path in (PACKAGE / layer).rglob("*.py")]
    modules = {_module_name(path): path for path in paths}
    graph = {name: {imported for imported in _imported(path) if imported in modules
                    and imported != name} for name, path in modules.items()}
    # Packages' __init__ modules are imported with any of their modules: count them.
    for name in modules:
        graph[name] |= {package for package in modules if name.startswith(package + ".")}
    visiting: list[str] = []
    done: set[str] = set()

    def visit(name: str) -> None:
        if name in done:
            return
        assert name not in visiting, " -> ".join([*visiting[visiting.index(name):], name])
        visiting.append(name)
        for imported in sorted(graph[name]):
            visit(imported)
        visiting.pop()
        done.add(name)

    for name in sorted(modules):
        visit(name)
    assert "quotaweb.executors.backends" in graph["quotaweb.scheduling.transitions"]


def test_a_failing_check_names_the_import() -> None:
    """The checks above can fail: a function-level import is found, with its line."""
    source = PACKAGE / "executors" / "base.py"
    assert not _function_level_imports(source)
    sample = Path(__file__).with_name("_layers_sample.py")
    sample.write_text("def late():\n    from quotaweb.scheduling import transitions\n")
    try:
        assert _function_level_imports(sample) == ["late (line 2)"]
    finally:
        sample.unlink()
