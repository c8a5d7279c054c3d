"""Every relative link in README.md and docs/*.md resolves: the file exists, and a
#fragment names a heading of the target (GitHub's anchors), so moving a section
between the docs cannot leave a link behind."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`[^`\n]*`")
# [text](target) and ![alt](target); the target may carry a "title".
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _prose_lines(text: str):
    """(line number, line) outside fenced code blocks."""
    in_fence = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if not in_fence:
            yield number, line


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text lowercased, punctuation other than
    hyphens and underscores removed, each space a hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "").replace("*", "")
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor of a Markdown file, with GitHub's -1, -2 ... for repeated headings."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for _, line in _prose_lines(path.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path):
    """(line number, target) of every link in the prose of a Markdown file."""
    for number, line in _prose_lines(path.read_text(encoding="utf-8")):
        for match in LINK.finditer(INLINE_CODE.sub("", line)):
            yield number, match.group(1)


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """The links of one file that do not resolve, each as 'file:line: target: why'."""
    problems = []
    for number, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto: ...
            continue
        file_part, _, fragment = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(root)}:{number}: {target}"
        if not resolved.exists():
            problems.append(f"{where}: no such file {file_part}")
        elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
            problems.append(f"{where}: no heading #{fragment} in {resolved.relative_to(root)}")
    return problems


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path):
    assert broken_links(path) == []


def test_the_readme_links_to_every_doc():
    linked = {(ROOT / target.partition("#")[0]).resolve() for _, target in links(ROOT / "README.md")}
    missing = [p.name for p in DOCS[1:] if p.resolve() not in linked]
    assert missing == [], f"docs the README's map does not link to: {missing}"


def test_github_slugs():
    assert slug("What you see after `make run`") == "what-you-see-after-make-run"
    assert slug("`manage.py plan`: one moment as JSON") == "managepy-plan-one-moment-as-json"
    assert slug("Failures: nothing a chart carries stalls the order or holds the budget") == (
        "failures-nothing-a-chart-carries-stalls-the-order-or-holds-the-budget")
    assert slug("ETAs: the forecast model, and how accurate it is") == (
        "etas-the-forecast-model-and-how-accurate-it-is")
    assert slug("1. Classify") == "1-classify"
    assert slug("Dispatch: head-of-line within the budget") == "dispatch-head-of-line-within-the-budget"


def test_a_broken_link_or_anchor_is_caught(tmp_path):
    (tmp_path / "other.md").write_text("# Other\n\n## A section\n\n## A section\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n"
        "[fine](other.md#a-section) [repeat](other.md#a-section-1) [self](#page)\n"
        "[gone](missing.md) [no heading](other.md#nowhere) [no self](#nothing)\n"
        "`[in code](missing.md)`\n\n```\n[in a block](missing.md)\n```\n"
        "[web](https://example.com/x.md)\n"
    )
    problems = broken_links(page, root=tmp_path)
    assert [p.split(": ")[1] for p in problems] == ["missing.md", "other.md#nowhere", "#nothing"]
