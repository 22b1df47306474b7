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
