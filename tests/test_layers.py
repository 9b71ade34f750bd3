"""The layering in docs/ARCHITECTURE.md is the real one: every import points down (or stays in
its layer), module-level imports form no cycle, and importing a low layer loads nothing of
the layers above it. The layer table is read from the document itself, so it stays true."""

from __future__ import annotations

import ast
import fnmatch
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {
    "runtime": "actorloop.runtime",
    "actors": "actorloop.actors",
    "codecs": "actorloop.codecs",
}


def read_layers() -> list[tuple[str, list[str]]]:
    """(layer name, module patterns) bottom first, from the ```layers block."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    match = re.search(r"```layers\n(.*?)```", text, flags=re.S)
    assert match, "docs/ARCHITECTURE.md has no ```layers block"
    layers: dict[int, tuple[str, list[str]]] = {}
    current: int | None = None
    for line in match.group(1).splitlines():
        head = re.match(r"(\d+)\s+([a-z ]+?)\s{2,}(.*)", line)
        if head:
            current = int(head.group(1))
            layers[current] = (head.group(2), head.group(3).split())
        elif line.strip() and current is not None:
            layers[current][1].extend(line.split())
    return [layers[number] for number in sorted(layers)]


LAYERS = read_layers()


def module_files() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            name = ".".join((package, *parts))
            modules[name.removesuffix(".__init__")] = path
    return modules


MODULES = module_files()


def layer_of(module: str) -> int:
    """The layer whose most specific pattern matches `module` (an exact name beats a glob)."""
    best: tuple[int, int] | None = None
    for index, (_name, patterns) in enumerate(LAYERS):
        for pattern in patterns:
            full = f"actorloop.{pattern}"
            if fnmatch.fnmatchcase(module, full):
                specificity = len(full.replace("*", ""))
                if best is None or specificity > best[1]:
                    best = (index, specificity)
    assert best is not None, f"{module} is in no layer of docs/ARCHITECTURE.md"
    return best[0]


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def package_of(path: Path) -> str:
    """The package a module's relative imports start from (a package's own, for __init__)."""
    for folder, package in FOLDERS.items():
        if path.is_relative_to(ROOT / folder):
            parts = path.relative_to(ROOT / folder).parts[:-1]
            return ".".join((package, *parts))
    raise AssertionError(f"{path} is in no package folder")


def absolute(node: ast.ImportFrom, path: Path) -> str | None:
    """The absolute module a `from ... import` names: relative forms resolved from the file."""
    if node.level == 0:
        return node.module
    base = package_of(path).split(".")
    assert node.level - 1 < len(base), f"{path}: a relative import climbs out of actorloop"
    base = base[: len(base) - (node.level - 1)]
    return ".".join((*base, node.module)) if node.module else ".".join(base)


def imports_of(path: Path) -> list[tuple[str, bool]]:
    """(imported actorloop module, made at import time) for every import in the file, in the
    absolute form (tests, docs) and the relative one (the package) alike."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, at_import_time: bool) -> None:
        for child in ast.iter_child_nodes(node):
            deferred = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) or (
                isinstance(child, ast.If) and _is_type_checking(child)
            )
            if deferred:
                visit(child, False)
            elif isinstance(child, ast.Import):
                found.extend((alias.name, at_import_time) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                module = absolute(child, path)
                if module is None:
                    continue
                for alias in child.names:
                    submodule = f"{module}.{alias.name}"
                    found.append((submodule if submodule in MODULES else module, at_import_time))
            else:
                visit(child, at_import_time)

    visit(tree, True)
    return [(name, eager) for name, eager in found if name.startswith("actorloop.")]


def test_the_package_imports_itself_relatively() -> None:
    """Inside the package every import of its own modules is relative (as trio's and httpx's
    are), so a tool that maps imports to files sees every arrow."""
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            absolute_own = [name for name in names if name.startswith("actorloop.")]
            assert absolute_own == [], f"{module} imports {absolute_own} by absolute path"


def test_relative_and_absolute_forms_name_the_same_module() -> None:
    """The resolution the layer checks rely on, on a relative and an absolute import."""
    path = ROOT / "runtime" / "log" / "session.py"
    relative = ast.parse("from ..model.events import Append\nfrom . import surface").body
    absolute_form = ast.parse("from actorloop.runtime.model.events import Append").body
    assert isinstance(relative[0], ast.ImportFrom) and isinstance(relative[1], ast.ImportFrom)
    assert isinstance(absolute_form[0], ast.ImportFrom)
    assert absolute(relative[0], path) == "actorloop.runtime.model.events"
    assert absolute(relative[1], path) == "actorloop.runtime.log"
    assert absolute(absolute_form[0], path) == "actorloop.runtime.model.events"


def test_every_module_is_in_exactly_one_layer() -> None:
    for module in MODULES:
        layer_of(module)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down(module: str) -> None:
    own = layer_of(module)
    for target, _eager in imports_of(MODULES[module]):
        assert target in MODULES, f"{module} imports {target}, which does not exist"
        assert layer_of(target) <= own, (
            f"{module} (layer {LAYERS[own][0]!r}) imports {target} "
            f"(layer {LAYERS[layer_of(target)][0]!r}, above it)"
        )


def test_no_import_cycle() -> None:
    # A package's __init__ runs before any of its modules (importing `a.b.c` imports `a.b`),
    # so that edge is in the graph; the package's own eager imports of its submodules are
    # not (Python resolves them while the package initialises), and are limited instead to
    # the foundation by test_package_inits_load_only_the_foundation.
    graph = {
        module: {
            target
            for target, eager in imports_of(path)
            if eager and target != module and not target.startswith(module + ".")
        }
        for module, path in MODULES.items()
    }
    for module in MODULES:
        parent = module.rpartition(".")[0]
        if parent in MODULES:
            graph[module].add(parent)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def connect(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                item = stack.pop()
                on_stack.discard(item)
                component.append(item)
                if item == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for module in graph:
        if module not in index:
            connect(module)
    assert cycles == []


def test_package_inits_load_only_the_foundation() -> None:
    for module, path in MODULES.items():
        if path.name != "__init__.py":
            continue
        for target, eager in imports_of(path):
            if eager:
                assert layer_of(target) == 0, f"{module} imports {target} when it is imported"


LOW_LAYER_IMPORTS = {
    "actorloop.codecs": ("actorloop.actors", "actorloop.runtime.providers", "httpx", "trio"),
    "actorloop.codecs.jsonvalue": ("actorloop.actors", "actorloop.runtime.providers", "httpx"),
    "actorloop.codecs.converter": ("actorloop.actors", "actorloop.runtime.providers", "httpx"),
    "actorloop.codecs.jsonl": (
        "actorloop.actors",
        "actorloop.runtime.log.session",
        "httpx",
        "trio",
    ),
    "actorloop.runtime.model.events": ("actorloop.actors", "actorloop.codecs.converter", "httpx"),
    "actorloop.runtime.log.session": ("actorloop.actors", "actorloop.runtime.providers", "httpx"),
    "actorloop.actors.loop.actor": ("actorloop.runtime.host", "httpx"),
}


@pytest.mark.parametrize("module", sorted(LOW_LAYER_IMPORTS))
def test_a_low_layer_loads_nothing_above_it(module: str) -> None:
    code = f"import sys, {module}\nprint('\\n'.join(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    loaded = result.stdout.split()
    for forbidden in LOW_LAYER_IMPORTS[module]:
        hits = [name for name in loaded if name == forbidden or name.startswith(forbidden + ".")]
        assert hits == [], f"importing {module} loaded {hits}"
