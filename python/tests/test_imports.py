"""The package's modules import each other without a circle (deferred imports inside functions
included), so any module can be imported first and static checkers find no cycle."""

import ast
from pathlib import Path

import kiln

PACKAGE = Path(kiln.__file__).parent


def local_imports(path: Path) -> set:
    """The kiln modules ``path`` imports, anywhere in it (``from . import x`` / ``from .x``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("kiln."):
            found.add(node.module.split(".")[1])
    return found


def test_kiln_modules_import_each_other_without_a_circle():
    modules = {p.stem: p for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    graph = {name: local_imports(path) & modules.keys() for name, path in modules.items()}
    done, on_path = set(), []

    def visit(name):
        if name in on_path:
            cycle = on_path[on_path.index(name):] + [name]
            raise AssertionError("import circle: " + " -> ".join(cycle))
        if name in done:
            return
        on_path.append(name)
        for dep in sorted(graph[name]):
            visit(dep)
        on_path.pop()
        done.add(name)

    for name in sorted(graph):
        visit(name)
    assert "torch" in graph and "_custom_function" in graph
