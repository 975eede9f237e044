"""memlab's own structure: the torch-free record core, helpers declared once, no import cycle, private names
kept private, short functions, no copied blocks."""
from __future__ import annotations

import ast
import io
import re
import subprocess
import sys
import tokenize
from collections import Counter
from pathlib import Path
from process_checks import HANG_GUARD_S
import pytest

pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)

MEMLAB = Path(__file__).resolve().parent.parent / "memlab"


def _modules() -> dict[str, ast.Module]:
    return {str(p.relative_to(MEMLAB.parent)): ast.parse(p.read_text(encoding="utf-8"))
            for p in sorted(MEMLAB.rglob("*.py"))}


def test_record_core_imports_no_torch():
    """``memlab.core.record`` (the record, statuses, modes, units, formatting) and the results reader run
    where torch is absent."""
    code = ("import sys, memlab.core.record, memlab.results; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'torch'); assert not bad, bad; "
            "assert 'pandas' not in sys.modules or 'memlab.results' in sys.modules")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert p.returncode == 0, p.stderr
    code = "import sys, memlab.core.record; bad = sorted(set(sys.modules) & {'torch', 'pandas', 'numpy'}); assert not bad, bad"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert p.returncode == 0, p.stderr


def test_shared_helpers_are_declared_once():
    """MODES, the optimizers and losses, STATUSES, the categories, MiB, fmt_mib, the number predicate and
    chunk bounds exist in one module each."""
    once = {"MODES": "memlab/core/setting.py", "OPTIMIZERS": "memlab/core/setting.py", "LOSSES": "memlab/core/setting.py",
            "STATUSES": "memlab/core/record.py", "fmt_mib": "memlab/core/record.py",
            "is_number": "memlab/core/record.py", "chunk_bounds": "memlab/functional/slice_accumulate.py",
            "CATEGORIES": "memlab/core/record.py", "ACTIVATION_CATEGORIES": "memlab/core/record.py",
            "FINISHED_STATUSES": "memlab/core/record.py", "MiB": "memlab/core/units.py"}
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
    assert not predicates, f"use memlab.core.record.is_number: {predicates}"


def _unit(module: str) -> str:
    """``memlab.measurement.step`` -> ``memlab.measurement``: a top-level module or subpackage (no
    subpackage is exempt: one whose modules sit on both sides of another is split in two)."""
    return ".".join(module.split(".")[:2])


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


# -- private names stay in their module ------------------------------------------------------------
def _module_names(path: str) -> tuple[list[str], list[str]]:
    """(package parts, module parts) of a memlab file: ``memlab/site/cuda.py`` -> (memlab.site, memlab.site.cuda)."""
    parts = path[:-3].split("/")
    module = [p for p in parts if p != "__init__"]
    return (parts[:-1] if parts[-1] != "__init__" else parts), module


def _is_module(dotted: str) -> bool:
    rel = Path(*dotted.split("."))
    return (MEMLAB.parent / rel).with_suffix(".py").is_file() or (MEMLAB.parent / rel / "__init__.py").is_file()


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_imports(modules: dict[str, ast.Module]) -> list[str]:
    """``from m import _x`` and ``m._x`` (``m`` an imported memlab module) anywhere in ``modules``.  A
    private *module* (``_papers.py``) may be imported by the modules of its own package."""
    found = []
    for path, tree in modules.items():
        package, _ = _module_names(path)
        aliases: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
                if not base.startswith("memlab"):
                    continue
                for a in node.names:
                    target = f"{base}.{a.name}"
                    if _is_module(target):
                        aliases.add(a.asname or a.name)
                        if _private(a.name) and base == ".".join(package):
                            continue  # a package's private helper module, imported inside the package
                    if _private(a.name):
                        found.append(f"{path}:{node.lineno} imports {a.name} from {base}")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("memlab") and a.asname:
                        aliases.add(a.asname)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and _private(node.attr)):
                found.append(f"{path}:{node.lineno} uses {node.value.id}.{node.attr}")
    return sorted(set(found))


def test_no_private_name_used_from_another_module():
    """A name starting with ``_`` is its module's own: another module that needs it gets a public name."""
    found = private_imports(_modules())
    assert not found, "private names used from another module (make them public):\n" + "\n".join(found)


# -- deferred imports say why --------------------------------------------------------------------------
#: why an import may stay inside a function, as its trailing comment says (issue 42): a package that is
#: optional, one that would carry torch (numpy, pandas) across the torch line, a cycle at import time,
#: or a heavy module the CLI leaves out of its start-up
DEFERRED_WHY = re.compile(r"# .*deferred: (optional dependency|torch line|import cycle \([\w.]+\)|heavy, CLI startup)")


def deferred_imports() -> list[tuple[str, int, str | None]]:
    """(path, line, reason or None) of every import statement inside a function in memlab/."""
    out = []
    for p in sorted(MEMLAB.rglob("*.py")):
        text = p.read_text(encoding="utf-8")
        rel = str(p.relative_to(MEMLAB.parent))
        comments = {tok.start[0]: tok.string for tok in tokenize.generate_tokens(io.StringIO(text).readline)
                    if tok.type == tokenize.COMMENT}

        def visit(node, in_function):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.Import, ast.ImportFrom)) and in_function:
                    found = [m.group(1) for line in range(child.lineno, child.end_lineno + 1)
                             if (m := DEFERRED_WHY.search(comments.get(line, "")))]
                    out.append((rel, child.lineno, found[0].split(" (")[0] if found else None))
                visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

        visit(ast.parse(text), False)
    return out


def test_every_deferred_import_says_why():
    """An import inside a function says why on its line(s) (``# deferred: optional dependency``,
    ``torch line``, ``import cycle (<module>)`` or ``heavy, CLI startup``); every other import is at the
    top of its module."""
    found = deferred_imports()
    counts = Counter(reason or "unexplained" for _, _, reason in found)
    bad = [f"{path}:{line}" for path, line, reason in found if reason is None]
    assert not bad, (f"imports inside functions without a reason (hoist them or add '# deferred: ...'); "
                     f"counts {dict(sorted(counts.items()))}:\n" + "\n".join(bad))


# -- short functions -----------------------------------------------------------------------------------
#: most lines a function (its ``def`` to its last line, docstring included) may have outside tests
MAX_FUNCTION_LINES = 60
#: functions over the limit today: split them, then delete their line here (the list only shrinks; a
#: function that is under the limit again fails the test until its line is gone)
LONG_FUNCTIONS: frozenset[str] = frozenset()


def long_functions(roots=("memlab", "benchmarks", "examples")) -> dict[str, int]:
    """``path:qualified name`` -> lines, for every function over :data:`MAX_FUNCTION_LINES`."""
    out = {}
    for root in roots:
        for p in sorted((MEMLAB.parent / root).rglob("*.py")):
            tree = ast.parse(p.read_text(encoding="utf-8"))
            rel = str(p.relative_to(MEMLAB.parent))

            def visit(node, prefix=""):
                for child in ast.iter_child_nodes(node):
                    if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        name = f"{prefix}{child.name}"
                        if not isinstance(child, ast.ClassDef):
                            n = child.end_lineno - child.lineno + 1
                            if n > MAX_FUNCTION_LINES:
                                out[f"{rel}:{name}"] = n
                        visit(child, name + ".")

            visit(tree)
    return out


def test_no_function_over_60_lines():
    found = long_functions()
    new = {k: v for k, v in found.items() if k not in LONG_FUNCTIONS}
    assert not new, f"functions over {MAX_FUNCTION_LINES} lines (split them):\n" + \
        "\n".join(f"{k}: {v}" for k, v in sorted(new.items()))
    fixed = sorted(LONG_FUNCTIONS - set(found))
    assert not fixed, f"under {MAX_FUNCTION_LINES} lines now: delete them from LONG_FUNCTIONS:\n" + "\n".join(fixed)


# -- small rooms ---------------------------------------------------------------------------------------
#: most ``.py`` files directly in ``memlab/`` (the rest live in subpackages)
MAX_TOP_LEVEL_MODULES = 12
#: most lines of one ``memlab/cli/`` module (one command: parse, check, call, print)
MAX_CLI_MODULE_LINES = 300


def test_few_modules_directly_in_memlab():
    found = sorted(p.name for p in MEMLAB.glob("*.py"))
    assert len(found) <= MAX_TOP_LEVEL_MODULES, \
        f"{len(found)} .py files directly in memlab/ (at most {MAX_TOP_LEVEL_MODULES}; move some into a subpackage): {found}"


def test_no_cli_module_over_300_lines():
    found = {str(p.relative_to(MEMLAB.parent)): n for p in sorted((MEMLAB / "cli").glob("*.py"))
             if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_CLI_MODULE_LINES}
    assert (MEMLAB / "cli" / "__init__.py").is_file()
    assert not found, f"memlab/cli modules over {MAX_CLI_MODULE_LINES} lines (split the command): {found}"


# -- no copied blocks ----------------------------------------------------------------------------------
#: consecutive code lines that make a copied block
DUPLICATE_WINDOW = 6


def _code_lines(text: str, tree: ast.Module) -> list[tuple[int, str]]:
    """(line number, stripped text) of every line that is code: blank lines, comments, docstrings and
    import statements left out."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            skip.update(range(node.lineno, node.end_lineno + 1))
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            skip.update(range(node.lineno, node.end_lineno + 1))
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if s and not s.startswith("#") and i not in skip:
            out.append((i, s))
    return out


def duplicate_blocks(window: int = DUPLICATE_WINDOW) -> list[str]:
    """Every run of ``window`` code lines that appears twice or more in memlab/ (line-hash windows, as
    pylint's duplicate-code does), one entry per copied block: ``path:line = path:line (n lines)``."""
    seen: dict[tuple[str, ...], tuple[str, int]] = {}
    pairs: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for p in sorted(MEMLAB.rglob("*.py")):
        text = p.read_text(encoding="utf-8")
        lines = _code_lines(text, ast.parse(text))
        rel = str(p.relative_to(MEMLAB.parent))
        for k in range(len(lines) - window + 1):
            key = tuple(s for _, s in lines[k:k + window])
            if key in seen:
                first_path, first_line = seen[key]
                if first_path == rel and lines[k][0] <= first_line + window:
                    continue  # a repeated line run overlapping itself
                pairs.setdefault((first_path, rel), []).append((first_line, lines[k][0]))
            else:
                seen[key] = (rel, lines[k][0])
    out = []
    for (a, b), spots in sorted(pairs.items()):
        prev = None
        for la, lb in spots:  # consecutive windows of one copied block are reported once
            if prev is None or lb - prev[1] > window:
                out.append(f"{a}:{la} = {b}:{lb}")
            prev = (la, lb)
    return out


def test_no_copied_blocks_in_memlab():
    """No run of six or more code lines (imports, comments and docstrings aside) appears twice in memlab/."""
    found = duplicate_blocks()
    assert not found, "blocks of code copied (factor them into one function):\n" + "\n".join(found)


def test_seed_names_only_in_their_reproductions():
    """A seed's own answers live in its reproduction module, reached through a hook (``cuda_variants``,
    ``CUDA_ANSWER_TECHNIQUE``): no general module names a seed."""
    from memlab.reproductions import list_reproductions

    seeds = set(list_reproductions())
    found = [f"{path}:{node.lineno} {node.value!r}" for path, tree in _modules().items()
             if "reproductions/" not in path for node in ast.walk(tree)
             if isinstance(node, ast.Constant) and node.value in seeds]
    assert not found, "seed names outside the reproductions (memlab/families/<family>/reproductions/):\n" + "\n".join(found)
