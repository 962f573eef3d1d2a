"""Headless Chromium opening a report page, for the tests and the bench: what a reader sees
and how long the page takes to be seen.

The probe is added to a copy of the page (the report itself runs no script). It counts the
charts that have a size, are displayed and visible, lie inside the page and draw a line, the
rows of the ranked tables, and the time from navigation to the first layout after load.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import NamedTuple

PROBE = """<script>
window.addEventListener("load", () => {
  let visible = 0;
  for (const chart of document.querySelectorAll("section svg.chart")) {
    const box = chart.getBoundingClientRect();
    const style = getComputedStyle(chart);
    if (box.width > 0 && box.height > 0 && style.display !== "none"
        && style.visibility === "visible"
        && box.bottom + window.scrollY <= document.documentElement.scrollHeight
        && chart.querySelector("polyline, circle")) visible += 1;
  }
  const rows = (selector) => document.querySelectorAll(selector + " td:first-child").length;
  const data = document.body.dataset;
  data.chartsVisible = String(visible);
  data.throttledRows = String(rows("table.throttled"));
  data.everyoneRows = String(rows("table.everyone"));
  data.loadMs = performance.now().toFixed(0);
});
</script>"""
CHROMIUM = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--window-size=1000,3200",
)  # fmt: skip


class Opened(NamedTuple):
    charts_visible: int
    #: rows of the throttled ranking, the folded ones too
    throttled_rows: int
    everyone_rows: int
    load_ms: int


def chromium(profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = ["chromium", *CHROMIUM, f"--user-data-dir={profile}", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)


def open_page(page: Path, workdir: Path) -> Opened:
    probed = workdir / "probed.html"
    probed.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"))
    dom = chromium(workdir / "profile-probe", "--dump-dom", probed.resolve().as_uri()).stdout
    found = dict(re.findall(r'data-([a-z-]+)="(\d+)"', dom[: dom.find(">", dom.find("<body"))]))
    try:
        return Opened(
            *(
                int(found[name])
                for name in ("charts-visible", "throttled-rows", "everyone-rows", "load-ms")
            )
        )
    except KeyError:
        raise AssertionError(f"the probe did not run: {dom[:2000]}") from None


def screenshot(page: Path, workdir: Path) -> bytes:
    shot = workdir / "report.png"
    chromium(workdir / "profile-shot", f"--screenshot={shot}", page.resolve().as_uri())
    return shot.read_bytes()
