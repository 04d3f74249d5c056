"""The package's import graph, read from the source (ast): circles, and private names imported across packages.

Every ``import`` counts, at module level or inside a function (a deferred import
still ties the two modules together), except those under ``if TYPE_CHECKING:``
(never run). An edge goes to the module named: ``from ..aggregation import X``
is an edge to ``streamfl.aggregation`` (its ``__init__``), ``from . import x``
to the submodule ``x`` when there is one. A *package* is a top-level folder of
the repository (``consumers``, ``producers``) or a subpackage of ``streamfl``
(``streamfl.vertical``, …; ``streamfl.cli`` and the other top modules are their own package).

Run as a script to print every circle (module level and package level) and every
cross-package private import:

    python tests/test_imports.py
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
TOP = ("streamfl", "consumers", "producers")

# circles fixed for good: a circle through any of these modules (or packages) fails the test
NO_CIRCLE_MODULES = {"streamfl.reproduce.cvfl", "streamfl.reproduce.cvfl_plots", "streamfl.reproduce.cvfl_settings",
                     "streamfl.runtime.experiment", "streamfl.runtime.header", "streamfl.runtime.chunks",
                     "streamfl.vertical.cvfl", "streamfl.vertical.sides"}
NO_CIRCLE_PACKAGES = {"streamfl.models", "streamfl.aggregation", "streamfl.updates"}
# modules that import no other package's private (_name) names
NO_PRIVATE_IMPORTS_IN = NO_CIRCLE_MODULES | {"streamfl.updates", "streamfl.runtime.sink", "streamfl.runtime.seeds",
                                             "streamfl.runtime.sweep"}


def modules() -> dict[str, Path]:
    """Dotted name → file, for every module of the repository's packages."""
    out = {}
    for top in TOP:
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def package_of(name: str) -> str:
    """``streamfl.vertical.cvfl`` → ``streamfl.vertical``; ``consumers.worker`` → ``consumers``."""
    parts = name.split(".")
    return ".".join(parts[:2]) if parts[0] == "streamfl" else parts[0]


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in node.body:
                lines.update(range(sub.lineno, (sub.end_lineno or sub.lineno) + 1))
    return lines


def imports(mods: dict[str, Path]) -> list[tuple[str, str, tuple[str, ...], int]]:
    """Every import between the repository's modules: (importer, imported module, names, line)."""
    out = []
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        skip = _type_checking_lines(tree)
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(tree):
            if getattr(node, "lineno", None) in skip:
                continue
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in mods:
                        out.append((name, a.name, (), node.lineno))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_pkg else name.split(".")[:-1]
                    base = base[:len(base) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if target not in mods:
                    continue
                plain = []
                for a in node.names:
                    sub = f"{target}.{a.name}"
                    if sub in mods:                 # from pkg import submodule
                        out.append((name, sub, (), node.lineno))
                    else:
                        plain.append(a.name)
                if plain:
                    out.append((name, target, tuple(plain), node.lineno))
    return out


def graph(edges, level: str = "module") -> nx.DiGraph:
    g = nx.DiGraph()
    for a, b, _, _ in edges:
        if level == "package":
            a, b = package_of(a), package_of(b)
        if a != b:
            g.add_edge(a, b)
    return g


def circles(g: nx.DiGraph) -> list[list[str]]:
    """The strongly connected components of more than one node (each one holds at least one circle), sorted."""
    return sorted(sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1)


def private_imports(edges) -> list[tuple[str, str, str, int]]:
    """(importer, module, name, line) for every ``_name`` imported from another package."""
    return [(a, b, n, line) for a, b, names, line in edges for n in names
            if n.startswith("_") and not n.startswith("__") and package_of(a) != package_of(b)]


def test_no_circle_among_the_fixed_modules():
    edges = imports(modules())
    bad = [c for c in circles(graph(edges)) if NO_CIRCLE_MODULES & set(c)]
    assert bad == [], f"import circles through modules kept circle-free: {bad}"
    bad = [c for c in circles(graph(edges, "package")) if NO_CIRCLE_PACKAGES & set(c)]
    assert bad == [], f"import circles through packages kept circle-free: {bad}"


def test_no_cross_package_private_import_in_the_fixed_files():
    bad = [p for p in private_imports(imports(modules())) if p[0] in NO_PRIVATE_IMPORTS_IN]
    assert bad == []


def test_the_walker_sees_a_circle_and_a_private_import():
    # the checks above cannot pass by seeing nothing: the walker finds real imports
    edges = imports(modules())
    found = {(a, b) for a, b, _, _ in edges}
    assert ("streamfl.vertical.train", "streamfl.vertical.cvfl") in found
    assert ("streamfl.cli", "streamfl.reproduce.cvfl") in found         # a deferred import inside a command
    g = nx.DiGraph([("a.x", "a.y"), ("a.y", "a.x"), ("a.y", "a.z")])
    assert circles(g) == [["a.x", "a.y"]]
    assert private_imports([("streamfl.a.m", "streamfl.b.n", ("_x", "y"), 3),
                            ("streamfl.a.m", "streamfl.a.k", ("_z",), 4)]) == [("streamfl.a.m", "streamfl.b.n", "_x", 3)]


if __name__ == "__main__":
    edges = imports(modules())
    for level in ("module", "package"):
        found = circles(graph(edges, level))
        print(f"{level}-level circles: {len(found)}")
        g = graph(edges, level)
        for c in found:
            sub = g.subgraph(c)
            two = sorted({tuple(sorted((a, b))) for a, b in sub.edges if sub.has_edge(b, a)})
            print(f"  {len(c)} nodes: {', '.join(c)}")
            for a, b in two:
                print(f"    {a} <-> {b}")
    found = private_imports(edges)
    print(f"cross-package private imports: {len(found)}")
    for a, b, n, line in found:
        print(f"  {a}:{line} imports {n} from {b}")
