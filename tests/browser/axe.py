"""Shared by test modules (from tests/browser/test_accessibility.py; no test module imports another)."""

import os

from playwright.sync_api import Page, expect

from tests.processes import ROOT

AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"


FAILING = tuple(os.environ.get("A11Y_IMPACTS", "serious,critical").split(","))


WIDTHS = {1440: 900, 390: 844}


def axe_violations(page: Page, axe_source: str) -> list[dict]:
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        # Evaluated by the test driver, not added as an inline <script>: the page's CSP refuses those.
        page.evaluate(axe_source)
    result = page.evaluate("() => axe.run(document, {resultTypes: ['violations']})")
    return result["violations"]


def settle(page: Page) -> None:
    """Draw the page as a person would read it: live state shown, every folded section open."""
    if page.locator("#live-indicator").count():
        expect(page.locator("#live-indicator")).to_have_attribute("data-state", "live", timeout=10_000)
    page.evaluate("document.querySelectorAll('details').forEach(d => { d.open = true; })")


def describe(findings: list[tuple[str, str, dict]], role: str, width: int) -> str:
    lines = [f"{len(findings)} accessibility violation(s) ({'/'.join(FAILING)}) as {role} at {width} px:"]
    for name, url, v in findings:
        lines.append(f"- [{v['impact']}] {v['id']} on {name} ({url}): {v['help']}")
        for node in v["nodes"][:6]:
            summary = " ".join((node.get("failureSummary") or "").split())
            lines.append(f"    at {' '.join(map(str, node['target']))}: {summary[:300]}")
        if len(v["nodes"]) > 6:
            lines.append(f"    … and {len(v['nodes']) - 6} more element(s)")
        lines.append(f"    {v['helpUrl']}")
    return "\n".join(lines)
