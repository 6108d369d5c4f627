"""The package layout: stage folders, arrows one way.

The import graph is read from the source with `ast` (every import statement, at module level or
inside a function): an edge A -> B for each module B of the package that A imports. The tests
fail on any cycle, on any library module importing an entry point (`run`, `cli`), on an arrow
that runs up the layer order of docs/ARCHITECTURE.md, and on more than 8 modules in the package
root. The size limits (files, functions) are test_layout_sizes.py's.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = "noma_prorl_bench"
SRC = Path(__file__).resolve().parents[2] / "src" / PKG
ENTRY_POINTS = {f"{PKG}.run", f"{PKG}.cli"}
# docs/ARCHITECTURE.md's layer order, top to bottom: a room (sub-package or root module) may import
# only rooms of lower layers; rooms of one layer do not import each other.
LAYERS: list[tuple[str, ...]] = [
    ("cli", "__init__"),
    ("run",),
    ("engines", "suite", "integrations", "grpo2026"),
    ("training",),
    ("rollout", "grpo"),
    ("algorithms",),
    ("analysis", "matrix"),
    ("io",),
    ("models",),
    ("tasks",),
    ("config",),
    ("_version",),
]
pytestmark = pytest.mark.unit


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in SRC.rglob("*.py")}


def imports_of(path: Path, modules: dict[str, Path]) -> set[str]:
    """The package modules that `path` imports (relative imports resolved)."""
    me = module_name(path)
    base = me.split(".") if path.name == "__init__.py" else me.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                mod = ".".join(base[: len(base) - node.level + 1] + ([mod] if mod else []))
            names = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in modules else mod for a in node.names]
        else:
            continue
        out.update(n for n in names if n in modules and n != me)
    return out


def import_graph() -> dict[str, set[str]]:
    modules = all_modules()
    return {m: imports_of(p, modules) for m, p in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a list of modules (first == last), or None (iterative DFS, three colours)."""
    colour = {m: 0 for m in graph}
    for root in sorted(graph):
        if colour[root]:
            continue
        stack = [(root, iter(sorted(graph[root])))]
        path = [root]
        colour[root] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                colour[node] = 2
                stack.pop()
                path.pop()
            elif colour[nxt] == 1:
                return path[path.index(nxt) :] + [nxt]
            elif colour[nxt] == 0:
                colour[nxt] = 1
                stack.append((nxt, iter(sorted(graph[nxt]))))
                path.append(nxt)
    return None


def test_cycle_finder_finds_a_planted_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_import_graph_has_no_cycle():
    graph = import_graph()
    assert len(graph) > 40  # the whole package was read
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph))}"


def test_no_library_module_imports_an_entry_point():
    bad = {
        m: sorted(deps & ENTRY_POINTS)
        for m, deps in import_graph().items()
        if m not in ENTRY_POINTS and deps & ENTRY_POINTS
    }
    assert bad == {}


def room(module: str) -> str:
    """The sub-package or root module a module belongs to: noma_prorl_bench.io.lock -> io."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def upward_arrows(graph: dict[str, set[str]], layers: list[tuple[str, ...]]) -> list[str]:
    """Arrows A -> B between rooms where B's layer is not below A's (rooms absent from `layers` too)."""
    rank = {r: i for i, layer in enumerate(layers) for r in layer}
    bad = []
    for a, deps in sorted(graph.items()):
        for b in sorted(deps):
            ra, rb = room(a), room(b)
            if ra != rb and not (ra in rank and rb in rank and rank[rb] > rank[ra]):
                bad.append(f"{a} -> {b}")
    return bad


def test_layer_checker_finds_a_planted_upward_arrow():
    graph = {f"{PKG}.io.x": {f"{PKG}.config.y"}, f"{PKG}.config.y": set()}
    assert upward_arrows(graph, LAYERS) == []
    graph[f"{PKG}.config.y"] = {f"{PKG}.training.z"}
    assert upward_arrows(graph, LAYERS) == [f"{PKG}.config.y -> {PKG}.training.z"]


def test_arrows_follow_the_layer_order():
    graph = import_graph()
    assert {room(m) for m in graph} <= {r for layer in LAYERS for r in layer}, "a room missing from LAYERS"
    assert upward_arrows(graph, LAYERS) == []


def test_package_root_holds_at_most_8_modules():
    root = sorted(p.name for p in SRC.glob("*.py"))
    assert len(root) <= 8, root


def _fresh_python(code: str) -> str:
    """Run `code` in a fresh interpreter with src/ importable; return its stdout."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(SRC.parent)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_public_api_names_resolve_lazily():
    # `import noma_prorl_bench` loads no submodule beyond _version; touching `Config` loads the
    # config package only (no torch), and `Config` is the RunConfig dataclass itself.
    code = (
        "import sys, noma_prorl_bench as p; before = sorted(m for m in sys.modules if m.startswith('noma'));"
        "c = p.Config(outdir='x'); from noma_prorl_bench.config import RunConfig;"
        "print(before, type(c) is RunConfig, 'torch' in sys.modules)"
    )
    assert _fresh_python(code) == "['noma_prorl_bench', 'noma_prorl_bench._version'] True False"


def test_entry_point_parses_without_importing_torch():
    # the seed entry point imports config only; torch comes with the library after parsing
    code = "import sys, noma_prorl_bench.run; print('torch' in sys.modules, 'numpy' in sys.modules)"
    assert _fresh_python(code) == "False False"
