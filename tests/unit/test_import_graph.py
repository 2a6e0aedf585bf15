"""The package's import graph: data flows one way, and packages keep their privates.

Builds the graph of every import statement in ``seenstore/`` (those inside
functions too: a late import hides a circle, it does not remove it) and fails on
any cycle. Importing ``a.b.c`` from outside package ``a.b`` runs ``a/b/__init__.py``
first, so that counts as an import of ``a.b`` as well. A second check fails when a
module outside a sub-package (``seenstore.store``, ``seenstore.url``, ...) imports
one of its ``_private`` names or reads one off an imported module.
"""

from __future__ import annotations

import ast
import os

import pytest

from conftest import REPO

ROOT = "seenstore"


def _modules() -> dict[str, str]:
    out = {}
    for folder, _, files in os.walk(os.path.join(REPO, ROOT)):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                name = os.path.relpath(path, REPO)[:-3].replace(os.sep, ".")
                out[name.removesuffix(".__init__")] = path
    return out


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES[name].endswith("__init__.py")


def _owner(name: str) -> str:
    """The unit that owns a module's privates: its sub-package, or itself at the top."""
    parts = name.split(".")
    return ".".join(parts[:2])


def _resolve(importer: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    parts = importer.split(".")
    if not _is_package(importer):
        parts = parts[:-1]
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def _known(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(name: str) -> tuple[set[str], list[tuple[str, str]], dict[str, str]]:
    """(modules imported, (module, private name) pairs imported, local alias -> module)."""
    tree = ast.parse(open(MODULES[name], encoding="utf-8").read())
    deps: set[str] = set()
    private: list[tuple[str, str]] = []
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == ROOT and _known(a.name):
                    deps.add(_known(a.name))
                    if a.asname:
                        aliases[a.asname] = _known(a.name)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(name, node)
            if base.split(".")[0] != ROOT:
                continue
            for a in node.names:
                full = f"{base}.{a.name}"
                if full in MODULES:
                    deps.add(full)
                    aliases[a.asname or a.name] = full
                elif _known(base):
                    deps.add(_known(base))
                    if a.name.startswith("_") and not a.name.startswith("__"):
                        private.append((_known(base), a.name))
    return deps, private, aliases


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name in MODULES:
        deps, _, _ = _imports(name)
        edges = set()
        for dep in deps:
            edges.add(dep)
            # the packages an import runs on the way, those the importer is not inside
            parts = dep.split(".")
            for i in range(2, len(parts)):
                pkg = ".".join(parts[:i])
                if not (name == pkg or name.startswith(pkg + ".")):
                    edges.add(pkg)
        edges.discard(name)
        graph[name] = edges
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_is_read():
    graph = _graph()
    assert "seenstore.store.facade" in graph and "seenstore.keys.batch" in graph
    assert "seenstore.kernels.dispatch" in graph["seenstore.keys.batch"]


def test_find_cycles_finds_a_planted_one():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    cycles = find_cycles(_graph())
    assert cycles == [], "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def _private_uses() -> list[str]:
    bad = []
    for name in MODULES:
        _, private, aliases = _imports(name)
        for module, attr in private:
            if _owner(module) != _owner(name):
                bad.append(f"{name} imports {module}.{attr}")
        tree = ast.parse(open(MODULES[name], encoding="utf-8").read())
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and node.attr.startswith("_")
                    and not node.attr.startswith("__")
                    and _owner(aliases[node.value.id]) != _owner(name)):
                bad.append(f"{name} reads {aliases[node.value.id]}.{node.attr}")
    return bad


def test_no_module_reaches_into_another_package_s_privates():
    bad = _private_uses()
    assert bad == [], "\n".join(bad)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_module_says_what_it_owns(name):
    """Every module starts with a docstring (what it owns and promises)."""
    if name.endswith("__main__"):
        return
    doc = ast.get_docstring(ast.parse(open(MODULES[name], encoding="utf-8").read()))
    assert doc and len(doc.split()) >= 8, f"{MODULES[name]}: no docstring saying what it owns"


# what sits above the engine, and who may import it
ABOVE = {"seenstore.cli": ("seenstore.cli",),
         "seenstore.bench": ("seenstore.cli", "seenstore.bench"),
         "seenstore.warmup": ("seenstore.cli", "seenstore.bench", "seenstore.cluster")}


def test_the_engine_never_imports_the_cli_the_benchmarks_or_the_warm_up():
    """The store, the URL path, the stage and the integrations never import what
    sits above them: the CLI, the benchmarks (seenstore.bench), the warm-up (which
    the CLI, the benchmarks and a cluster's shard actors run)."""
    bad = [f"{name} imports {dep}" for name, deps in _graph().items() for dep in deps
           for top, allowed in ABOVE.items()
           if (dep == top or dep.startswith(top + ".")) and not name.startswith(allowed)]
    assert bad == [], "\n".join(bad)
