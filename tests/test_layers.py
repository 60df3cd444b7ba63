"""The Python package imports only downward and has no import cycle: every
`import` and `from ... import` of every module (lazy ones inside functions too), read with
`ast` without importing anything, against the layers the data flows through."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO

PKG = REPO / "src" / "isaforge"
C_EXTENSIONS = {"isaforge._native", "isaforge._bench"}

# lowest first; a module may import its own layer (no cycle) and the ones below
LAYERS = [
    ("core", ["isaforge._native", "isaforge._bench", "isaforge.types", "isaforge.settings"]),
    ("quant", ["isaforge.quant"]),
    ("formats", ["isaforge.formats"]),
    ("text", ["isaforge.text"]),
    ("runtime", ["isaforge.runtime", "isaforge.reference", "isaforge.synthetic"]),
    ("api", ["isaforge.model", "isaforge.pull", "isaforge.converter", "isaforge"]),
    ("front ends", ["isaforge.cli", "isaforge.__main__", "isaforge.bench", "isaforge.serve"]),
]


def modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        parts = p.relative_to(PKG.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def layer_of(mod: str) -> int:
    best, rank = -1, None
    for i, (_, prefixes) in enumerate(LAYERS):
        for pre in prefixes:
            if (mod == pre or mod.startswith(pre + ".")) and len(pre) > best:
                best, rank = len(pre), i
    assert rank is not None, f"{mod} is in no layer: add it to LAYERS"
    return rank


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    known = set(mods) | C_EXTENSIONS
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    src = ".".join(base + ([node.module] if node.module else []))
                else:
                    src = node.module or ""
                subs = [f"{src}.{a.name}" for a in node.names if f"{src}.{a.name}" in known]
                targets = subs if subs and len(subs) == len(node.names) else [src, *subs]
            for t in targets:
                while t and t not in known:  # a name inside a module: the module
                    t = t.rsplit(".", 1)[0] if "." in t else ""
                if t.startswith("isaforge") and t != mod:
                    edges[mod].add(t)
    return edges


def test_every_module_imports_only_its_layer_or_below():
    mods = modules()
    edges = imports(mods)
    up = sorted(f"{m} ({LAYERS[layer_of(m)][0]}) imports {t} ({LAYERS[layer_of(t)][0]})"
                for m, ts in edges.items() for t in ts if layer_of(t) > layer_of(m))
    assert up == []


def test_no_import_cycle():
    edges = imports(modules())
    state: dict[str, int] = {}
    cycles = []

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for t in sorted(edges.get(m, ())):
            if state.get(t) == 1:
                cycles.append(" -> ".join(stack[stack.index(t):] + [t]))
            elif t in edges and not state.get(t):
                visit(t, stack + [t])
        state[m] = 2

    for m in sorted(edges):
        if not state.get(m):
            visit(m, [m])
    assert cycles == []


def test_the_walker_sees_the_imports_it_checks():
    """The checks above would pass vacuously if the walker found nothing: it must see, e.g.,
    that formats.gguf imports the quantizer and the engine imports the C core."""
    edges = imports(modules())
    assert "isaforge.quant.q8" in edges["isaforge.formats.gguf"]
    assert "isaforge._native" in edges["isaforge.runtime.engine"]
    assert "isaforge.formats" in edges["isaforge.model"]


def test_the_package_imports_itself_relatively():
    """One import style inside the package: its own modules by relative import (`from ..types
    import Config`), so a module reads the same wherever the package is installed or vendored."""
    absolute = []
    for mod, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                     else [])
            absolute += [f"{mod}:{node.lineno} {n}" for n in names
                         if n == "isaforge" or n.startswith("isaforge.")]
    assert absolute == []
