"""The layout shows the layers (docs/architecture.md): every import goes down, none up or
across, so there is no import cycle, and no import hides inside a function to dodge one."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Bottom up. A module may import its own package and the packages listed before it.
LAYERS = [
    "fairsched.core",        # the scheduling rules and the scenario contract: pure Python
    "common",                # shared helpers, no models
    "fairsched.runtime",     # embedded services, supervisor, warm stop
    "control",               # the scheduler's control records (settings, rounds, deployment, audit) and services
    "orgs",
    "charts",
    "fairsched.temporal",    # workflows, activities, the worker
    "fairsched.engine",      # the live scheduler
    "fairsched.management",  # the commands
    "jobs",
    "dashboard",
    "api",                   # the producer API (/api/v1/): nothing imports it but config
    "monitoring",            # the Prometheus scrape target /metrics
    "config",                # the Django project
]
TOP = {name.split(".")[0] for name in LAYERS}
# ``fairsched/`` is no layer of its own: it holds layers 1, 3, 7, 8 and 9, and at its root only
# the app that installs the commands, counted with them.
ROOT_OF_COMMANDS = {"fairsched": "fairsched.management", "fairsched.apps": "fairsched.management"}


def _layer_of(module: str) -> str:
    if module in ROOT_OF_COMMANDS:
        return ROOT_OF_COMMANDS[module]
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


def _imports(path: Path, modules: dict[str, Path]) -> list[tuple[int, str, bool]]:
    """(line, imported project module, inside a function?) of every import in ``path``."""
    tree = ast.parse(path.read_text())
    in_function = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                   for n in ast.walk(f)}
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                     for a in node.names]
        for name in names:
            if name.split(".")[0] in TOP:
                found.append((node.lineno, name, id(node) in in_function))
    return found


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


def test_every_module_is_in_a_layer():
    """The tree shows the layers: each module lives in a package of the table, and the root
    of ``fairsched/`` holds only the packages of its layers and the commands' app."""
    stray = [f"{path.relative_to(ROOT)}: in no layer ({_layer_of(module)})"
             for module, path in sorted(_modules().items()) if _layer_of(module) not in LAYERS]
    assert not stray, "\n".join(stray)


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
