"""The layout shows the layers (docs/architecture.md): every import goes down, none up or
across, so there is no import cycle, and no import hides inside a function to dodge one."""
from __future__ import annotations

import ast
import functools
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Bottom up. A module may import its own package and the packages listed before it.
LAYERS = [
    "scheduling",            # the scheduling rules and the scenario contract: pure Python
    "common",                # shared helpers, no models
    "control",               # the scheduler's control records (settings, rounds, deployment, audit) and services
    "orgs",
    "charts",
    "fairsched.runtime",     # embedded services, supervisor, warm stop
    "fairsched.temporal",    # workflows, activities, the worker
    "fairsched.engine",      # the live scheduler
    "fairsched.management",  # the commands
    "fairsched",             # its root: the app that installs the commands
    "jobs",
    "dashboard",
    "api",                   # the producer API (/api/v1/): nothing imports it but config
    "monitoring",            # the Prometheus scrape target /metrics
    "config",                # the Django project
]
TOP = {name.split(".")[0] for name in LAYERS}
# The web apps are of one level: none imports another (issue 42, goal 5). What they share lives
# below them: the reads in ``charts/selectors.py``, the token model in ``orgs``.
WEB_APPS = ("jobs", "dashboard", "api", "monitoring")
# ``fairsched/`` holds the live scheduler's layers, one above the other (runtime, temporal,
# engine, management) and at its root the app that installs the commands: the tree shows the
# layers, and no package below imports it.


def _layer_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 1 and ".".join(parts[:2]) in LAYERS:
        return ".".join(parts[:2])
    return parts[0]


def _modules() -> dict[str, Path]:
    out = {}
    for top in TOP:
        for path in (ROOT / top).rglob("*.py"):
            rel = path.relative_to(ROOT)
            if "migrations" in rel.parts:
                continue
            name = ".".join(rel.with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
    return out


def _module_of(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def _absolute(node: ast.ImportFrom, path: Path) -> str | None:
    """The module an ``import from`` names, a relative one (``from .keys import x``) made
    absolute against ``path``'s package."""
    if not node.level:
        return node.module
    try:
        package = _module_of(path).split(".") if path.name == "__init__.py" else _module_of(path).split(".")[:-1]
    except ValueError:  # a file outside the tree (the check's own tests): relative to nothing
        return node.module
    base = package[:len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


@functools.cache
def _parsed_imports(path: Path) -> tuple[tuple[int, str | None, tuple[str, ...], bool], ...]:
    """(line, ``from`` module made absolute or None for ``import``, names, inside a function?)
    of every import in ``path``: parsed once a run (the checks below read every file again)."""
    tree = ast.parse(path.read_text())
    in_function = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                   for n in ast.walk(f)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.append((node.lineno, None, tuple(a.name for a in node.names), id(node) in in_function))
        elif isinstance(node, ast.ImportFrom):
            found.append((node.lineno, _absolute(node, path), tuple(a.name for a in node.names),
                          id(node) in in_function))
    return tuple(found)


def _all_imports(path: Path, modules: dict[str, Path]) -> list[tuple[int, str, bool]]:
    """(line, imported module, inside a function?) of every import in ``path``, relative ones
    made absolute, ``from package import module`` naming the module: the standard
    library's and third parties' too."""
    found = []
    for line, module, names, hidden in _parsed_imports(path):
        if module is None:
            found.extend((line, name, hidden) for name in names)
        elif module:
            found.extend((line, f"{module}.{a}" if f"{module}.{a}" in modules else module, hidden) for a in names)
    return found


def _imports(path: Path, modules: dict[str, Path]) -> list[tuple[int, str, bool]]:
    """(line, imported project module, inside a function?) of every import in ``path`` of
    one of the project's modules, relative imports included."""
    return [(line, name, hidden) for line, name, hidden in _all_imports(path, modules) if name.split(".")[0] in TOP]


def test_every_import_goes_down_the_layers():
    modules = _modules()
    rank = {name: i for i, name in enumerate(LAYERS)}
    wrong = []
    for module, path in sorted(modules.items()):
        mine = _layer_of(module)
        for line, target, _ in _imports(path, modules):
            theirs = _layer_of(target)
            if theirs != mine and rank[theirs] >= rank[mine]:
                wrong.append(f"{path.relative_to(ROOT)}:{line}: {mine} imports {target} ({theirs} is not below it)")
    assert not wrong, "\n".join(wrong)


def _web_apps_importing_each_other(files: dict[str, Path], modules: dict[str, Path]) -> list[str]:
    """``module:line: app imports target`` for each import of one web app's module from another
    web app (:data:`WEB_APPS`)."""
    wrong = []
    for module, path in sorted(files.items()):
        mine = module.split(".")[0]
        if mine not in WEB_APPS:
            continue
        for line, target, _ in _imports(path, modules):
            theirs = target.split(".")[0]
            if theirs in WEB_APPS and theirs != mine:
                wrong.append(f"{module}:{line}: {mine} imports {target} (web apps import none of each other)")
    return list(dict.fromkeys(wrong))  # one line a module, however many names it takes


def test_the_web_apps_import_none_of_each_other():
    """``api``, ``dashboard``, ``monitoring`` and ``jobs`` are of one level: each reads what it
    shares with another from below (``charts.selectors``, ``orgs.models``), never from it."""
    modules = _modules()
    wrong = _web_apps_importing_each_other(modules, modules)
    assert not wrong, "\n".join(wrong)


def test_the_check_sees_a_web_app_importing_another(tmp_path):
    """The check itself: the API reading the dashboard's selectors (as it did) is reported,
    relatively too; its reads from charts and orgs are not."""
    api = tmp_path / "api"
    api.mkdir()
    (api / "bad.py").write_text("from dashboard import selectors\nfrom charts.selectors import org_status\n"
                                "from orgs.models import OrgToken\n")
    (api / "worse.py").write_text("from ..monitoring import sources\n")
    modules = _modules()
    files = {"api.bad": api / "bad.py", "api.worse": api / "worse.py"}
    assert _web_apps_importing_each_other(files, modules) == [
        "api.bad:1: api imports dashboard.selectors (web apps import none of each other)",
        "api.worse:1: api imports monitoring.sources (web apps import none of each other)",
    ]


def test_every_module_is_in_a_layer():
    """The tree shows the layers: each module lives in a package of the table, and the root
    of ``fairsched/`` holds only the packages of its layers and the commands' app."""
    stray = [f"{path.relative_to(ROOT)}: in no layer ({_layer_of(module)})"
             for module, path in sorted(_modules().items()) if _layer_of(module) not in LAYERS]
    assert not stray, "\n".join(stray)


def _package_of(module: str) -> str:
    """The package a module is drawn in: its top-level package, or the subpackage (a folder
    with an ``__init__.py``) directly below it that holds it (``scheduling.queue``)."""
    parts = module.split(".")
    if len(parts) > 1 and (ROOT / parts[0] / parts[1] / "__init__.py").exists():
        return ".".join(parts[:2])
    return parts[0]


def _cycles(modules: dict[str, Path], node=lambda m: m) -> list[list[str]]:
    """The import graph's cycles (its strongly connected components of more than one node,
    or a node importing itself), by Tarjan's algorithm; ``node`` draws a module as a node
    (itself, or its package: :func:`_package_of`). An import under ``TYPE_CHECKING``
    counts: a circle a type hint needs is a circle in the design. A package's
    ``__init__`` is the package's module."""
    graph: dict[str, set[str]] = {}
    for m, p in modules.items():
        edges = graph.setdefault(node(m), set())
        edges.update(node(t) for _, t, _ in _imports(p, modules) if t in modules and node(t) != node(m))
    graph = {v: sorted(w) for v, w in graph.items()}
    for targets in list(graph.values()):
        for t in targets:
            graph.setdefault(t, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_even_inside_a_layer():
    """The layer rule keeps cycles out between layers; this keeps them out inside one too
    (``queue.py`` and ``queue_loads.py``, now ``queue/fair_queue.py`` and ``queue/loads.py``, once
    imported each other, one of them for a type)."""
    cycles = _cycles(_modules())
    assert not cycles, "\n".join(" <-> ".join(c) for c in cycles)


def test_no_import_cycle_between_packages():
    """Drawn by package (each top-level package and each subpackage one node), the graph has
    no cycle either: ``scheduling``'s modules once imported the live order
    (``scheduling.queue``, which imports them) to re-export it and to simulate with it; the
    contract and the simulator now live above it, in ``scheduling.contract`` (issue 42, goal 4)."""
    cycles = _cycles(_modules(), _package_of)
    assert not cycles, "\n".join(" <-> ".join(c) for c in cycles)


def test_the_check_sees_a_cycle_and_a_relative_import(tmp_path):
    """The checks themselves: two modules importing each other (one relatively, one for a
    type) are a cycle."""
    pkg = tmp_path / "scheduling"
    pkg.mkdir(parents=True)
    (pkg / "a.py").write_text("from .b import x\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from scheduling.a import y\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        modules = {"scheduling.a": pkg / "a.py", "scheduling.b": pkg / "b.py"}
        assert _cycles(modules) == [["scheduling.a", "scheduling.b"]]
    finally:
        ROOT = saved


def test_the_core_imports_the_standard_library_only():
    """``scheduling`` is pure: no Django, no I/O library, nothing of the project's outside
    it; the standard library only (and ``__future__``)."""
    allowed = set(sys.stdlib_module_names) | {"__future__"}
    modules = _modules()
    wrong = [f"{path.relative_to(ROOT)}:{line}: imports {name}"
             for module, path in sorted(modules.items()) if _layer_of(module) == "scheduling"
             for line, name, _ in _all_imports(path, modules)
             if _layer_of(name) != "scheduling" and name.split(".")[0] not in allowed]
    assert not wrong, "\n".join(wrong)


def test_no_import_hides_in_a_function():
    """The one exception is Django's idiom: an AppConfig connects its signals in ready()."""
    modules = _modules()
    hidden = [f"{path.relative_to(ROOT)}:{line}: {target}"
              for module, path in sorted(modules.items()) if not module.endswith(".apps")
              for line, target, in_function in _imports(path, modules) if in_function]
    assert not hidden, "\n".join(hidden)


def test_the_check_sees_an_upward_import(tmp_path):
    """The check itself: an engine module importing the dashboard is reported."""
    bad = tmp_path / "bad.py"
    bad.write_text("from dashboard import views\n")
    modules = _modules()
    (_, target, _), = _imports(bad, modules)
    assert _layer_of(target) == "dashboard"
    assert LAYERS.index(_layer_of(target)) > LAYERS.index(_layer_of("fairsched.engine.scheduler"))


@pytest.mark.django_db
def test_the_models_and_their_migrations_agree():
    """A model change without its migration (an index, a field) would reach a database
    only as an error at run time: ``makemigrations --check`` finds none to make."""
    from tests.cli import manage

    out = manage("makemigrations", "--check", "--dry-run")
    assert out.returncode == 0, out.stdout + out.stderr
