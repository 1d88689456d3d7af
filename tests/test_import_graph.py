"""The package-level import graph of ``unified/`` and ``evaluators/`` (read with ``ast``, nothing imported).

A node is a subpackage (``unified.agent``, ``evaluators.claw_eval``) or a top-level module
(``unified.contracts``, ``unified.store``); an edge ``A -> B`` is any import in A of a module of
B, at the top of a file or inside a function (a function-local import is still a dependency).
The rules (issue 16):

(a) ``unified.contracts`` imports neither ``unified.agent`` nor ``unified.eval``;
(b) no cycle between the packages of ``unified``;
(c) no evaluator imports another evaluator;
(d) the core (``unified``) never imports ``evaluators``.

``python tests/test_import_graph.py`` prints the graph's figures (cycles, strongly connected
groups, function-local imports).
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("unified", "evaluators")


@dataclass
class ImportGraph:
    edges: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    """node -> the nodes it imports (self-imports left out)."""
    where: dict[tuple[str, str], list[str]] = field(default_factory=lambda: defaultdict(list))
    """(node, node) -> ``file:line`` of every import making that edge."""
    local_imports: int = 0
    """Imports of ``unified``/``evaluators`` modules inside a function (or class) body."""
    local_cross_package: int = 0
    """Those of them that cross a package boundary."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def node_of(module: str) -> str:
    """``unified.agent.loop`` -> ``unified.agent``; ``unified.store`` -> ``unified.store``."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else parts[0]


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:  # relative: resolve against this module's package
        base = module.split(".")
        base = base[:len(base) - node.level + (1 if is_package else 0)]
        prefix = ".".join(base + ([node.module] if node.module else []))
    else:
        prefix = node.module or ""
    if node.module is None or node.level:  # "from . import x": x may be a submodule
        return [f"{prefix}.{alias.name}" for alias in node.names] + [prefix]
    return [prefix]


def _function_local(tree: ast.Module) -> set[int]:
    """ids of the import nodes inside a def or class body (top-level ``if``/``try`` blocks are top level)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            inside.update(id(n) for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom)))
    return inside


def build_graph(root: Path = ROOT) -> ImportGraph:
    graph = ImportGraph()
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            module = module_name(path)
            source = node_of(module)
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            local = _function_local(tree)
            for node in ast.walk(tree):
                if not isinstance(node, (ast.Import, ast.ImportFrom)):
                    continue
                targets = {node_of(t) for t in _targets(node, module, path.name == "__init__.py")
                           if t.split(".")[0] in PACKAGES and t.count(".") >= 1}
                if id(node) in local and targets:
                    graph.local_imports += 1
                    graph.local_cross_package += any(t != source for t in targets)
                for target in targets - {source}:
                    graph.edges[source].add(target)
                    graph.where[(source, target)].append(f"{path.relative_to(root)}:{node.lineno}")
    return graph


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one node, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(set(edges) | {w for ws in edges.values() for w in ws}):
        if v not in index:
            visit(v)
    return sorted(groups)


def two_cycles(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted((a, b) for a in edges for b in edges[a] if a < b and a in edges.get(b, ()))


def _explain(graph: ImportGraph, pairs) -> str:
    return "\n".join(f"  {a} -> {b}: {', '.join(graph.where[(a, b)][:4])}" for a, b in pairs)


GRAPH = build_graph()


def test_the_graph_is_read_from_the_sources():
    """A reader that finds nothing would pass every rule: check it sees known edges of both kinds."""
    assert "unified.contracts" in GRAPH.edges["unified.agent"]
    assert "unified.contracts" in GRAPH.edges["evaluators.claw_eval"]
    assert GRAPH.local_imports > 0
    groups = strongly_connected({"a": {"b"}, "b": {"c", "a"}, "c": set(), "d": {"d"}})
    assert groups == [["a", "b"]]


def test_contracts_import_neither_agent_nor_eval():
    bad = [(s, t) for s, t in [("unified.contracts", "unified.agent"), ("unified.contracts", "unified.eval")]
           if t in GRAPH.edges.get(s, ())]
    assert not bad, _explain(GRAPH, bad)


def test_no_cycles_between_unified_packages():
    core = {s: {t for t in ts if t.startswith("unified.")} for s, ts in GRAPH.edges.items()
            if s.startswith("unified.")}
    groups = strongly_connected(core)
    pairs = [(a, b) for group in groups for a in group for b in group if b in core.get(a, ())]
    assert groups == [], f"import cycles {groups}:\n{_explain(GRAPH, pairs)}"


def test_no_evaluator_imports_another():
    bad = [(s, t) for s, ts in GRAPH.edges.items() if s.startswith("evaluators.")
           for t in sorted(ts) if t.startswith("evaluators.")]
    assert not bad, _explain(GRAPH, bad)


def test_core_never_imports_evaluators():
    bad = [(s, t) for s, ts in GRAPH.edges.items() if s.startswith("unified")
           for t in sorted(ts) if t.split(".")[0] == "evaluators"]
    assert not bad, _explain(GRAPH, bad)


if __name__ == "__main__":
    core = {s: {t for t in ts if t.startswith("unified.")} for s, ts in GRAPH.edges.items() if s.startswith("unified.")}
    print("nodes:", len(set(GRAPH.edges) | {t for ts in GRAPH.edges.values() for t in ts}))
    print("edges:", sum(len(ts) for ts in GRAPH.edges.values()))
    print("2-cycles:", two_cycles(GRAPH.edges))
    print("strongly connected groups (unified):", strongly_connected(core))
    print("function-local imports of unified/evaluators modules:", GRAPH.local_imports,
          f"({GRAPH.local_cross_package} across packages)")
