"""axe-core, the accessibility checker, run inside a page in Chromium.

axe-core comes from npm (``tests/browser/package.json``, pinned in its lock file);
``make install`` runs ``npm ci`` here. The rules are WCAG 2.0 and 2.1, levels A and AA
(:data:`TAGS`), or every rule axe-core runs by default, its best practices included
(:data:`ALL`: the whole-page test, ``test_axe_browser.py``).
"""
from __future__ import annotations

from pathlib import Path

import pytest

AXE_JS = Path(__file__).resolve().parent / "node_modules" / "axe-core" / "axe.min.js"
TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
ALL = None  # ``tags=ALL``: every rule axe-core runs by default (WCAG 2.x A/AA and its best practices)


def axe_source() -> str:
    if not AXE_JS.exists():
        pytest.fail(f"{AXE_JS} is missing: run `make install` (it runs `npm ci` in tests/browser; needs npm)",
                    pytrace=False)
    return AXE_JS.read_text()


def violations(page, within: str | None = None, tags: list[str] | None = TAGS) -> list[dict]:
    """axe-core's violations on what ``page`` shows now: ``[{id, impact, help, nodes: [{target, summary}]}]``;
    ``within``: a CSS selector, only what is inside it (a panel's own); ``tags``: the rules run
    (:data:`TAGS`, WCAG 2 A and AA; :data:`ALL`, axe-core's default set, best practices included).

    The script is added through the DevTools protocol (``page.add_script_tag`` would be an
    inline script, which the pages' Content-Security-Policy refuses)."""
    if not page.evaluate("typeof window.axe === 'object'"):
        page.evaluate(axe_source())  # evaluated by DevTools, outside the page's CSP
    return page.evaluate("""async ([tags, within]) => {
        const r = await axe.run(within ? {include: [[within]]} : document,
                                {...(tags ? {runOnly: {type: "tag", values: tags}} : {}), resultTypes: ["violations"]});
        return r.violations.map((v) => ({id: v.id, impact: v.impact, help: v.help,
            nodes: v.nodes.map((n) => ({target: n.target.join(" "), summary: n.failureSummary}))}));
    }""", [tags, within])


def count(found: list[dict]) -> int:
    return sum(len(v["nodes"]) for v in found)


def report(found_by_page: dict[str, list[dict]], limit: int = 8) -> str:
    """Each page's violations, by rule: its id, how many, what it asks, and the first elements."""
    lines = []
    for name, found in found_by_page.items():
        if not found:
            continue
        lines.append(f"{name}: {count(found)} elements")
        for v in found:
            lines.append(f"  [{v['id']}] {len(v['nodes'])}x {v['help']}")
            for n in v["nodes"][:limit]:
                summary = " ".join((n["summary"] or "").split())
                lines.append(f"    {n['target']}: {summary[:220]}")
            if len(v["nodes"]) > limit:
                lines.append(f"    ... and {len(v['nodes']) - limit} more")
    return "\n".join(lines)
