"""Every link between the pages, and every place the code cites a page's heading, lands on a
heading that exists: a reader sent somewhere finds it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)")
#: how code cites a heading: a page, a comma and the heading quoted, as (docs/fleet.md, "Workers")
CITATION = re.compile(r"((?:docs/)?[\w-]+\.md), \"([^\"]+)\"")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def headings(page: Path) -> list[str]:
    lines, fenced = [], False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (found := re.match(r"#{1,6} (.+)", line)):
            lines.append(found.group(1))
    return lines


def test_every_link_between_pages_lands_on_a_page_and_heading() -> None:
    broken = []
    for page in PAGES:
        for target, anchor in LINK.findall(page.read_text()):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path = (page.parent / target).resolve() if target else page
            if not path.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor and path.suffix == ".md" and anchor not in map(slug, headings(path)):
                broken.append(f"{page.name}: {target}#{anchor}")
    assert not broken


def test_every_heading_the_code_cites_exists() -> None:
    files = subprocess.run(
        ["git", "ls-files", "*.py", "*.toml", "*.yml", "Makefile", "Dockerfile"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    broken = []
    for name in files:
        text = " ".join((ROOT / name).read_text().split())  # citations may wrap a line
        for page, heading in CITATION.findall(text):
            path = ROOT / page if "/" in page else ROOT / "docs" / page
            if not path.exists():
                path = ROOT / page
            if not path.exists() or not any(heading in h for h in headings(path)):
                broken.append(f"{name}: {page}, {heading!r}")
    assert not broken
