"""Fail on any import circle among our packages (issue 46 point 2): `make lint` runs this,
tests/contract/test_import_cycles.py too.

The graph is grimp's (the library under import-linter), built from the sources of every
package under libs/*/src and services/**/src: every `import` and `from ... import`,
those inside functions included, so a circle hidden behind a function-level import counts.
Imports under `if TYPE_CHECKING:` never run and are left out; third-party packages are not
in the graph (deferring one on purpose is fine).

One edge is added to what grimp records: importing `a.b.c` from outside package `a.b`
first runs `a/b/__init__.py` (and `a/__init__.py`), so such an import is also an import of
those packages. That is how `k4d.bus.worker -> k4d.stage_events -> k4d.bus.base` was a
circle: `k4d/bus/__init__.py` imports the worker.

Usage: python tools/check_import_cycles.py   (exit 1 and the circles when there are any)
"""

from __future__ import annotations

import sys
from collections import deque
from pathlib import Path

import grimp

REPO = Path(__file__).resolve().parents[1]
SOURCE_ROOTS = ("libs/*/src", "services/*/src", "services/*/*/src")
GENERATED = {"kinema4d"}  # protobuf stubs (tools/gen_protos.py), not ours to arrange


def our_packages(repo: Path = REPO) -> list[str]:
    """Top-level package names under the source roots: each directory holding Python files
    (k4d_simulator and k4d_embedded are namespace packages, without __init__.py)."""
    found = {path.parent.name for pattern in SOURCE_ROOTS for path in repo.glob(f"{pattern}/*/*.py")}
    return sorted(found - GENERATED)


def import_edges(graph: grimp.ImportGraph) -> dict[str, set[str]]:
    """{importer: imported modules}: grimp's direct imports plus, for an import of a module
    inside a package the importer is not in, that package's `__init__` (Python runs it first)."""
    edges: dict[str, set[str]] = {module: set() for module in graph.modules}
    for importer in graph.modules:
        for imported in graph.find_modules_directly_imported_by(importer):
            edges[importer].add(imported)
            parts = imported.split(".")
            for depth in range(1, len(parts)):
                package = ".".join(parts[:depth])
                if not (importer == package or importer.startswith(package + ".")):
                    edges[importer].add(package)
    return edges


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module (iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def shortest_circle(edges: dict[str, set[str]], component: list[str]) -> list[str]:
    """One shortest circle through the component's first module: [m, ..., m]."""
    start, members = component[0], set(component)
    previous: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(edges[node] & members):
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(previous[path[-1]])
                return [start, *reversed(path[:-1]), start] if node != start else [start, start]
            if child not in previous:
                previous[child] = node
                queue.append(child)
    return component


def import_circles(packages: list[str] | None = None) -> list[list[str]]:
    """Each circle as a closed path of module names, [a, b, ..., a]; [] when there is none."""
    graph = grimp.build_graph(*(packages or our_packages()), exclude_type_checking_imports=True,
                              cache_dir=None)
    edges = import_edges(graph)
    return [shortest_circle(edges, component) for component in strongly_connected(edges)]


def main() -> int:
    circles = import_circles()
    for circle in circles:
        print("import circle: " + " -> ".join(circle), file=sys.stderr)
    if circles:
        print(f"{len(circles)} import circle(s): move the shared code into a module both sides "
              "import at the top (tools/check_import_cycles.py)", file=sys.stderr)
    return 1 if circles else 0


if __name__ == "__main__":
    sys.exit(main())
