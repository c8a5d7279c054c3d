"""Functions small enough to read: none of the project's has a cyclomatic complexity over
20 (radon's count: each branch, loop, boolean operator and comprehension's condition adds
one). A function that grows past it is split into steps with names, as ``org_update`` and
``insert_rows`` were (docs/architecture.md)."""
from __future__ import annotations

from pathlib import Path

from radon.complexity import cc_visit

from tests.test_layers import ROOT, TOP

LIMIT = 20


def _blocks():
    for top in sorted(TOP):
        for path in sorted((ROOT / top).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            for block in cc_visit(path.read_text()):
                yield path, block
                for method in getattr(block, "methods", ()):
                    yield path, method


def test_no_function_is_more_complex_than_the_limit():
    over = [f"{path.relative_to(ROOT)}:{block.lineno}: {block.fullname} has complexity {block.complexity}"
            for path, block in _blocks() if block.complexity > LIMIT and not hasattr(block, "methods")]
    assert not over, "\n".join(over)


def test_the_check_counts_what_it_should(tmp_path: Path):
    """The check itself: a function of 21 branches is over the limit."""
    body = "\n".join(f"    if x == {i}:\n        return {i}" for i in range(LIMIT + 1))
    block, = cc_visit(f"def f(x):\n{body}\n")
    assert block.complexity == LIMIT + 2 > LIMIT
