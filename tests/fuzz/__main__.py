"""Coverage-guided fuzzing of every decoder the proxy runs on client bytes (atheris).

    python -m tests.fuzz [--inputs N] [--harness NAME ...] [--jobs J] [--seed S] [--artifacts DIR]

N inputs are shared among the harnesses (all of them by default); each harness runs in its
own process, J at a time (one per core by default), seeded with the real client requests
in tests/fuzz/corpus (see capture.py).
An input that raises anything but ProtocolError stops its harness: the input is written
to DIR as crash-<sha1>, the traceback printed, and the command exits 1. Replay one with
`python -m tests.fuzz --harness NAME --replay FILE`.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HARNESS_NAMES = (
    "framing",
    "header",
    "produce",
    "record_batches",
    "fetch",
    "sasl",
    "admin",
    "group_heartbeat",
    "connection",
)
#: the largest input libFuzzer makes; the seeds of the request APIs are smaller
MAX_INPUT_BYTES = 16384
#: the code whose branches guide the fuzzer: the proxy's and the codec it decodes with
INSTRUMENTED = ["protocol", "proxy", "quotas", "kafka.protocol", "kafka.record"]


def _fuzz_one(name: str, argv: list[str]) -> None:
    """In the harness's own process: libFuzzer exits the process when it is done. Only code
    first imported here is instrumented, so this module imports none of it at the top."""
    import atheris

    with atheris.instrument_imports(include=INSTRUMENTED):
        from tests.fuzz.harnesses import HARNESSES, run
    harness = HARNESSES[name]
    atheris.Setup([sys.argv[0], *argv], lambda data: run(harness, data))
    atheris.Fuzz()


def _replay(name: str, path: Path) -> int:
    from tests.fuzz.harnesses import HARNESSES, run

    run(HARNESSES[name], path.read_bytes())
    print(f"{path}: no finding")
    return 0


def _run_harness(name: str, inputs: int, seed: int, artifacts: Path, work: Path) -> bool:
    """Fuzz one harness for `inputs` runs; False when it found something."""
    from tests.fuzz.seeds import write_seeds  # not in the fuzzing process: see _fuzz_one

    seeds = write_seeds(name, work / f"{name}-seeds")
    grown = work / f"{name}-grown"  # libFuzzer writes new coverage here, not into the repo
    grown.mkdir()
    argv = [
        f"-runs={inputs}",
        f"-seed={seed}",
        f"-max_len={MAX_INPUT_BYTES}",
        f"-artifact_prefix={artifacts}/{name}-",
        "-print_final_stats=1",
        str(grown),
        str(seeds),
    ]
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "tests.fuzz", "--one", name, *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    elapsed = time.monotonic() - started
    out = result.stderr
    done = re.search(r"Done (\d+) runs", out)
    cov = re.findall(r"cov: (\d+)", out)
    if result.returncode != 0 or done is None:
        start = out.find("Uncaught Python exception")
        artifact = re.findall(r"Test unit written to (\S+)", out)
        print(
            f"{name}: FINDING (exit {result.returncode}), input saved as {artifact}\n"
            f"{out[start:][:4000] if start >= 0 else out[-4000:]}",
            flush=True,
        )
        return False
    print(
        f"{name}: {int(done.group(1)):,} inputs in {elapsed:.1f} s, no finding; "
        f"{len(list(seeds.iterdir()))} seeds, coverage {cov[-1] if cov else '?'} edges, "
        f"{len(list(grown.iterdir()))} inputs added to the corpus",
        flush=True,
    )
    return True


def main(argv: list[str] | None = None) -> int:
    args_list = sys.argv[1:] if argv is None else argv
    if args_list[:1] == ["--one"]:
        _fuzz_one(args_list[1], args_list[2:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=1_000_000, help="shared by the harnesses")
    parser.add_argument("--harness", action="append", choices=HARNESS_NAMES)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--artifacts", type=Path, default=Path("fuzz-findings"))
    parser.add_argument("--replay", type=Path, help="run one saved input through --harness")
    args = parser.parse_args(args_list)
    names = args.harness or list(HARNESS_NAMES)
    if args.replay is not None:
        return _replay(names[0], args.replay)
    args.artifacts.mkdir(parents=True, exist_ok=True)
    each = max(args.inputs // len(names), 1)
    started = time.monotonic()
    artifacts = args.artifacts.resolve()
    with (
        tempfile.TemporaryDirectory(prefix="kqp-fuzz-") as tmp,
        ThreadPoolExecutor(max_workers=args.jobs) as pool,
    ):
        clean = list(
            pool.map(lambda name: _run_harness(name, each, args.seed, artifacts, Path(tmp)), names)
        )
    print(
        f"{each * len(names):,} inputs over {len(names)} harnesses in "
        f"{time.monotonic() - started:.0f} s: {clean.count(False)} with findings"
    )
    return 0 if all(clean) else 1


if __name__ == "__main__":
    raise SystemExit(main())
