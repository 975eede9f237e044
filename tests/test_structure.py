"""memlab's own structure: the torch-free record core, helpers declared once, no import cycle."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

MEMLAB = Path(__file__).resolve().parent.parent / "memlab"


def _modules() -> dict[str, ast.Module]:
    return {str(p.relative_to(MEMLAB.parent)): ast.parse(p.read_text(encoding="utf-8"))
            for p in sorted(MEMLAB.rglob("*.py"))}


def test_record_core_imports_no_torch():
    """``memlab.record`` (the record, statuses, modes, units, formatting) and the results reader run
    where torch is absent."""
    code = ("import sys, memlab.record, memlab.results; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'torch'); assert not bad, bad; "
            "assert 'pandas' not in sys.modules or 'memlab.results' in sys.modules")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    code = "import sys, memlab.record; bad = sorted(set(sys.modules) & {'torch', 'pandas', 'numpy'}); assert not bad, bad"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr


def test_shared_helpers_are_declared_once():
    """MODES, STATUSES, the categories, MiB, fmt_mib, the number predicate and chunk bounds exist in one
    module each."""
    once = {"MODES": "memlab/record.py", "STATUSES": "memlab/record.py", "fmt_mib": "memlab/record.py",
            "is_number": "memlab/record.py", "chunk_bounds": "memlab/functional/slice_accumulate.py",
            "CATEGORIES": "memlab/record.py", "ACTIVATION_CATEGORIES": "memlab/record.py",
            "FINISHED_STATUSES": "memlab/record.py", "MiB": "memlab/units.py"}
    found: dict[str, list[str]] = {name: [] for name in once}
    predicates = []
    for path, tree in _modules().items():
        for node in tree.body:
            targets = ([t.id for t in node.targets if isinstance(t, ast.Name)] if isinstance(node, ast.Assign)
                       else [node.target.id] if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                       else [node.name] if isinstance(node, ast.FunctionDef) else [])
            for name in targets:
                if name in found:
                    found[name].append(path)
        for node in ast.walk(tree):  # a private re-implementation of the number predicate
            if not isinstance(node, ast.FunctionDef) or path == once["is_number"]:
                continue
            code = [n for n in node.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
            if len(code) == 1:
                body = code[0]
                terms = body.value.values if isinstance(body, ast.Return) and isinstance(body.value, ast.BoolOp) else []
                text = [ast.unparse(t) for t in terms]
                if len(text) == 3 and text[1].startswith("not isinstance(") and "isfinite(" in text[2]:
                    predicates.append(f"{path}:{node.lineno} {node.name}")
    assert found == {name: [where] for name, where in once.items()}
    assert not predicates, f"use memlab.record.is_number: {predicates}"


#: subpackages whose modules are checked one by one: ``memlab/cuda/`` holds layers on both sides of the
#: measurement (the allocator model, calibration, device view and prediction below it, pure functions of
#: a trace; the seed variants and the GPU check above it, which measure)
_LAYERED = ("memlab.cuda",)


def _unit(module: str) -> str:
    """``memlab.measurement.step`` -> ``memlab.measurement``: a top-level module or subpackage (a module
    of a :data:`_LAYERED` subpackage is its own unit)."""
    parts = module.split(".")
    return ".".join(parts[:3] if ".".join(parts[:2]) in _LAYERED else parts[:2])


def test_no_import_cycle_among_top_level_modules():
    """Every import statement (module level or inside a function) between memlab's top-level modules
    and subpackages; a cycle fails, naming the imports that close it.  The registry finds the built-in
    workload and technique packages by name, so discovery is not an edge."""
    graph: dict[str, dict[str, str]] = {}
    for path, tree in _modules().items():
        parts = path[:-3].split("/")
        package = parts[:-1] if parts[-1] != "__init__" else parts
        unit = _unit(".".join(p for p in parts if p != "__init__"))
        edges = graph.setdefault(unit, {})
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
                targets = [base] if node.module else [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for target in targets:
                if target.startswith("memlab.") and _unit(target) not in (unit, "memlab"):
                    edges.setdefault(_unit(target), f"{path}:{node.lineno}")
    cycles, state = [], {}

    def visit(unit: str, trail: list[str]) -> None:
        state[unit] = "open"
        for dep in sorted(graph.get(unit, {})):
            if state.get(dep) == "open":
                loop = trail[trail.index(dep):] + [unit, dep] if dep in trail else [unit, dep]
                cycles.append(" -> ".join(f"{a} ({graph[a][b]})" for a, b in zip(loop, loop[1:])))
            elif dep not in state:
                visit(dep, trail + [unit])
        state[unit] = "done"

    for unit in sorted(graph):
        if unit not in state:
            visit(unit, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)
