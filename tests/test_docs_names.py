"""Every file, class member, module function and migration that README.md and docs/*.md name
in code (`path/to/file.py`, `tests/x.py::test_name`, `Class.method`, `module.function`,
`app.0007_name`) exists, so a
file deleted or a method moved cannot leave the docs pointing at nothing. Read with ast:
nothing is imported."""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

from tests.test_docs_links import DOCS, FENCE, ROOT

SKIP_DIRS = {".git", ".venv", "node_modules", "var", "__pycache__", ".pytest_cache", ".hypothesis"}
# Files the running system writes (var/ is ignored by git); the docs may name them.
RUNTIME = ("var/",)
EXT = r"(?:py|json|js|css|html|sh|toml|md|yml|yaml|txt|lock|cfg|ini)"
PATH = re.compile(rf"([\w.@-]+(?:/[\w.@-]+)*\.{EXT})(?:::(\w+)(\.\.\.)?)?")
DOTTED = re.compile(r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)")
CODE = re.compile(r"`([^`\n]+)`")
MIGRATION = re.compile(r"(\w+)[./](\d{4}_\w+)")  # orgs.0007_org_turnaround, dashboard/0002_orgtoken_scope


@dataclass
class Index:
    """What the project's Python defines, by name: classes (members, bases) and modules."""
    classes: dict[str, list[tuple[set[str], list[str]]]] = field(default_factory=dict)
    modules: dict[str, list[set[str]]] = field(default_factory=dict)  # "charts.services" and "services"
    packages: set[str] = field(default_factory=set)

    def class_has(self, name: str, member: str) -> bool | None:
        """True or False when the project's definitions of ``name`` tell; None when a base
        outside the project (a Django model's ``objects``) may hold it."""
        if name not in self.classes:
            return None
        external = False
        for members, bases in self.classes[name]:
            if member in members:
                return True
            for base in bases:
                if base in self.classes:
                    if self.class_has(base, member):
                        return True
                elif base not in {"object", "Generic", "Protocol"}:
                    external = True
        return None if external else False

    def module_has(self, dotted: str, member: str) -> bool | None:
        """A module's top-level name. Of a package only its modules are judged: ``charts.X``
        may be an app label's model or permission (``charts.view_chart``)."""
        if f"{dotted}.{member}" in self.modules:
            return True
        if dotted in self.packages or dotted not in self.modules:
            return None
        return any(member in top for top in self.modules[dotted])


def project_files(root: Path = ROOT) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and not SKIP_DIRS & set(p.relative_to(root).parts)]


def _names(body) -> set[str]:
    out: set[str] = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Assign):
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.If, ast.Try)):
            out |= _names(node.body) | _names(getattr(node, "orelse", []))
    return out


def build_index(root: Path = ROOT) -> Index:
    index = Index()
    for path in project_files(root):
        rel = path.relative_to(root)
        if path.suffix != ".py" or rel.parts[0] in {"tests", "bench"} or "migrations" in rel.parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top = _names(tree.body)
        parts = rel.with_suffix("").parts
        package = parts[-1] == "__init__"
        if package:
            parts = parts[:-1]
        # "scheduling.plan", "core.plan" and "plan": the docs name a module as its package does
        for i in range(len(parts)):
            index.modules.setdefault(".".join(parts[i:]), []).append(top)
            if package:
                index.packages.add(".".join(parts[i:]))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = [b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute)
                         else b.value.id if isinstance(b, ast.Subscript) and isinstance(b.value, ast.Name) else "?"
                         for b in node.bases]
                index.classes.setdefault(node.name, []).append((_names(node.body), bases))
    return index


def code_spans(path: Path):
    """(line number, text) of every inline code span, and every line of a fenced block."""
    in_fence = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            yield number, line, True
        else:
            for span in CODE.findall(line):
                yield number, span, False


def missing_names(path: Path, root: Path = ROOT, index: Index | None = None) -> list[str]:
    """What one Markdown file names that does not exist, each as 'file:line: name: why'."""
    index = index or _index()
    basenames = _basenames(root)
    problems = []
    for number, span, fenced in code_spans(path):
        where = f"{path.relative_to(root)}:{number}"
        for word in re.split(r"[\s,;()\[\]=\"'|]+", span):
            match = PATH.fullmatch(word)
            if match and not word.startswith(("/", "~", "http")):
                name, test, elided = match.groups()
                if "/" in name:
                    target = root / name
                    if name.startswith(RUNTIME):
                        continue
                    if not target.exists():
                        problems.append(f"{where}: {word}: no such file")
                    elif test and not elided and not re.search(rf"^\s*(async )?def {test}\b|^class {test}\b",
                                                               target.read_text(encoding="utf-8"), re.M):
                        problems.append(f"{where}: {word}: no {test} in {name}")
                    elif test and elided and not re.search(rf"def {test}", target.read_text(encoding="utf-8")):
                        problems.append(f"{where}: {word}: no test starting {test} in {name}")
                elif not fenced and not name.endswith(".json") and name not in basenames:
                    # a bare file name ("sync.py"); a bare *.json is an endpoint (status.json)
                    problems.append(f"{where}: {word}: no file of that name in the project")
                continue
            if fenced:
                continue
            migration = MIGRATION.fullmatch(word.strip(".:"))
            if migration:
                if not migration_exists(root, *migration.groups()):
                    problems.append(f"{where}: {word}: no such migration")
                continue
            dotted = word.strip(".:")
            if DOTTED.fullmatch(dotted) and not PATH.fullmatch(dotted):  # not part of "fairsched-rqcron.service"
                *owner, member = dotted.split(".")
                owner_name = ".".join(owner)
                verdict = index.class_has(owner_name, member) if len(owner) == 1 else None
                if verdict is None:
                    verdict = index.module_has(owner_name, member)
                if verdict is False:
                    problems.append(f"{where}: {dotted}: {owner_name} has no {member}")
    return problems


def migration_exists(root: Path, app: str, name: str) -> bool:
    """``app`` is a directory or an app's label (control's is ``fairsched``)."""
    for found in root.glob(f"*/migrations/{name}.py"):
        app_dir = found.parent.parent
        apps = app_dir / "apps.py"
        if app_dir.name == app or (apps.exists() and re.search(rf"label = [\"']{app}[\"']", apps.read_text())):
            return True
    return False


@cache
def _index() -> Index:
    return build_index()


@cache
def _basenames(root: Path) -> frozenset[str]:
    return frozenset(p.name for p in project_files(root))


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_named_file_and_function_exists(path):
    assert missing_names(path) == []


def test_a_missing_file_class_member_or_function_is_caught(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "engine.py").write_text(
        "class Base:\n    def shared(self): ...\n\n"
        "class Sync(Base):\n    async def _unknown(self): ...\n\n"
        "class Model(models.Model):\n    due_at = 1\n\n"
        "def helper(): ...\n")
    (tmp_path / "pkg" / "migrations").mkdir()
    (tmp_path / "pkg" / "migrations" / "0002_due.py").write_text("")
    (tmp_path / "pkg" / "apps.py").write_text('class C:\n    label = "legacy"\n')
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("def test_one(): ...\ndef test_two_long_name(): ...\n")
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        "Fine: `pkg/engine.py`, `engine.py`, `Sync._unknown`, `Sync.shared`, `engine.helper`,\n"
        "`pkg.engine.helper()`, `Model.due_at`, `Model.objects.create`, `tests/test_x.py::test_one`,\n"
        "`tests/test_x.py::test_two...`, `var/out.txt`, `status.json`, `/orgs/x/status.json`,\n"
        "`python pkg/engine.py --flag`, `django.conf.settings`, `pkg.0002_due`, `legacy/0002_due`.\n"
        "Gone: `pkg/signals.py`, `signals.py`, `Sync._gone`, `engine.gone`, `pkg.engine.gone`,\n"
        "`tests/test_x.py::test_three`, `tests/test_x.py::test_four...`, `pkg.0001_due`, `other.0002_due`.\n"
        "```\npython pkg/missing.py\n```\n")
    problems = missing_names(page, root=tmp_path, index=build_index(tmp_path))
    assert [p.split(": ")[1] for p in problems] == [
        "pkg/signals.py", "signals.py", "Sync._gone", "engine.gone", "pkg.engine.gone",
        "tests/test_x.py::test_three", "tests/test_x.py::test_four...", "pkg.0001_due", "other.0002_due",
        "pkg/missing.py"], problems


def unnamed_packages(page: Path, root: Path = ROOT) -> list[str]:
    """The tree's packages (a folder with an ``__init__.py``; tests, bench scripts and
    migrations aside) that ``page`` names neither as ``path/`` nor by one of its modules
    (``path/module.py``)."""
    text = page.read_text()
    out = []
    tops = [d for d in root.iterdir() if d.is_dir() and (d / "__init__.py").exists() and d.name not in ("tests", "bench")]
    for init in sorted(i for top in tops for i in top.rglob("__init__.py")):
        rel = init.parent.relative_to(root)
        if "migrations" in rel.parts:
            continue
        path = rel.as_posix()
        if f"`{path}/`" not in text and not re.search(rf"`{re.escape(path)}/[a-z_]+\.py`", text):
            out.append(path)
    return out


def test_architecture_names_every_package_of_the_tree():
    """docs/architecture.md is the map of the code: a package it does not name is one a
    newcomer cannot place (each module it names exists: the test above)."""
    assert unnamed_packages(ROOT / "docs" / "architecture.md") == []


def test_an_unnamed_package_is_caught(tmp_path):
    for pkg in ("app", "app/sub", "app/migrations", "tests/x"):
        (tmp_path / pkg).mkdir(parents=True)
        (tmp_path / pkg / "__init__.py").write_text("")
    page = tmp_path / "map.md"
    page.write_text("`app/`, and nothing of its subpackage\n")
    assert unnamed_packages(page, root=tmp_path) == ["app/sub"]
    page.write_text("`app/`, `app/sub/thing.py`\n")
    assert unnamed_packages(page, root=tmp_path) == []
