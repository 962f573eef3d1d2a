"""`kafka-quota-proxy report` over a generated day of a fleet: wall time and samples/s.

The default is issue 14's: 1,000 principals sampled every 10 s for a day (8,640 windows),
every one producing and 158 also fetching, 10,005,120 samples in all, written as rotated
JSON-lines files of 100,000 samples, as the proxy writes them. The samples are generated once
into .cache/ (a directory per size) and reused; the job runs in local mode on every core, as
the CLI does by default. Headless Chromium then opens the page and says how long it took.
"""

from __future__ import annotations

import argparse
import itertools
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from localkafka.chromium import open_page, screenshot
from localkafka.inprocess.samples import day_of_principals
from localkafka.jars import CACHE

_FILE_SAMPLES = 100_000


def generate(directory: Path, principals: int, windows: int, fetchers: int) -> int:
    marker = directory / f"_complete-{principals}-{windows}-{fetchers}"
    if marker.exists():
        return int(marker.read_text())
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob("usage-*.jsonl"):
        old.unlink()
    samples = day_of_principals(principals, windows, fetchers)
    count = 0
    for index in itertools.count():
        chunk = list(itertools.islice(samples, _FILE_SAMPLES))
        if not chunk:
            break
        path = directory / f"usage-bench-{index:05d}.jsonl"
        path.write_text("".join(sample.to_json() + "\n" for sample in chunk))
        count += len(chunk)
    marker.write_text(str(count))
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.usage_report", description=__doc__)
    parser.add_argument("--principals", type=int, default=1000)
    parser.add_argument("--windows", type=int, default=8640)
    parser.add_argument("--fetchers", type=int, default=158)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument(
        "--screenshot",
        type=Path,
        metavar="PNG",
        help="also save the page's top as headless Chromium draws it "
        "(docs/usage-reports.md's picture)",
    )
    args = parser.parse_args(argv)
    # a directory per size: the default day takes minutes to generate, a quick run must keep it
    size_name = f"{args.principals}x{args.windows}x{args.fetchers}"
    samples_dir = CACHE / "bench-usage" / f"samples-{size_name}"
    started = time.monotonic()
    count = generate(samples_dir, args.principals, args.windows, args.fetchers)
    size = sum(path.stat().st_size for path in samples_dir.glob("usage-*.jsonl"))
    print(
        f"{count} samples, {size / 1e9:.2f} GB of JSON lines "
        f"(ready in {time.monotonic() - started:.0f} s)",
        flush=True,
    )
    out = CACHE / "bench-usage" / f"report-{size_name}"
    command = [
        *(sys.executable, "-m", "proxy", "report", "--samples", str(samples_dir)),
        *("--out", str(out), "--master", args.master),
        *("--conf", "spark.ui.showConsoleProgress=false", "--conf", "spark.driver.memory=4g"),
    ]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.monotonic() - started
    if done.returncode:
        print(done.stderr[-4000:], file=sys.stderr)
        return done.returncode
    print(done.stdout, end="")
    stages = [line for line in done.stderr.splitlines() if line.startswith("report: ")]
    print("\n".join(stages))
    what_if = next((line for line in stages if line.startswith("report: what-if")), "")
    took = re.search(r": ([0-9.]+) s \(at ", what_if)
    what_if_s = float(took.group(1)) if took else float("nan")
    html = (out / "report.html").stat().st_size
    print(
        f"report over {count} samples: {wall:.0f} s wall, {count / wall:,.0f} samples/s "
        f"({args.master}), the what-if {what_if_s:.0f} s of it ({what_if_s / wall:.0%}); "
        f"report.html {html / 1e6:.1f} MB"
    )
    with tempfile.TemporaryDirectory() as workdir:
        opened = open_page(out / "report.html", Path(workdir))
        if args.screenshot:
            args.screenshot.write_bytes(screenshot(out / "report.html", Path(workdir)))
    print(
        f"headless Chromium: loaded and laid out in {opened.load_ms} ms, "
        f"{opened.charts_visible} charts visible, {opened.throttled_rows} throttled rows, "
        f"{opened.everyone_rows} rows in the table of every principal"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
