"""The proxy's image, built from the Dockerfile and run as it is: with no arguments it serves
with its own config and answers /readyz; it holds every module of the checkout, checks the
compose files' configs offline, says its version, and leaves `top`'s screen (Textual) out.

Built in podman on the Debian base of localkafka/engine.py (the Dockerfile's BASE argument),
where no registry is reachable.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from importlib import metadata

import pytest

from localkafka.engine import BASE, ensure_base, podman
from localkafka.ports import free_port
from tests.deploy.tools import ROOT

IMAGE = "localhost/kafka-quota-proxy:test"


@pytest.fixture(scope="module")
def image() -> str:
    ensure_base()
    podman(
        *("build", "--quiet", "--format", "docker", "--build-arg", f"BASE={BASE}"),
        *("--tag", IMAGE, str(ROOT)),
    )
    return IMAGE


def in_image(
    image: str, *args: str, entrypoint: str | None = None
) -> subprocess.CompletedProcess[str]:
    command = ["podman", "run", "--rm", "--network", "none"]
    if entrypoint is not None:
        command += ["--entrypoint", entrypoint]
    return subprocess.run(
        [*command, image, *args], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture
def bare(image: str) -> Iterator[int]:
    """`docker run IMAGE`, nothing else but its metrics port published; that port."""
    port = free_port()
    name = f"kqp-bare-{port}"
    podman("run", "--detach", "--name", name, "--publish", f"127.0.0.1:{port}:9464", image)
    try:
        yield port
    finally:
        podman("rm", "--force", name, check=False)


def test_run_with_no_arguments_serves_and_answers_readyz(bare: int) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{bare}/readyz", timeout=2) as answer:
                status, body = answer.status, answer.read()
        except urllib.error.HTTPError as refused:  # not ready: it says what it waits for
            status, body = refused.code, refused.read()
        except OSError:
            assert time.monotonic() < deadline, "no answer on the metrics port"
            time.sleep(0.5)
            continue
        break
    checks = json.loads(body)["checks"]
    # the bootstrap serves; the cluster the config names (kafka:9092) is not on this network
    assert status == 503
    assert checks["listeners"] == "ok" and checks["draining"] == "ok"
    assert "kafka:9092" in checks["cluster_metadata"]


def test_the_image_holds_every_module_of_the_checkout(image: str) -> None:
    tracked = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "proxy", "protocol", "quotas", "config", "pipeline"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    modules = [
        path[: -len(".py")].replace("/", ".").removesuffix(".__init__")
        for path in tracked
        if path.endswith(".py")
        and not path.endswith("__main__.py")  # runs the command line when imported
        and not path.startswith(("pipeline/", "proxy/top/screen"))  # the extras
    ]
    code = "import importlib, sys\nfor m in sys.argv[1:]: importlib.import_module(m)"
    imported = in_image(image, "-c", code, *modules, entrypoint="python")
    assert imported.returncode == 0, imported.stderr


def test_the_compose_configs_check_offline_in_the_image(image: str) -> None:
    for name in ("docker.toml", "docker-b.toml", "image.toml"):
        checked = subprocess.run(
            [
                *("podman", "run", "--rm", "--network", "none"),
                *("--volume", f"{ROOT / 'config'}:/etc/kafka-quota-proxy-checkout:ro"),
                *(image, "check-config", "--offline", f"/etc/kafka-quota-proxy-checkout/{name}"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert checked.returncode == 0, (name, checked.stderr)
        assert checked.stdout.startswith(f"/etc/kafka-quota-proxy-checkout/{name}: valid\n")


def test_the_image_says_its_version_and_leaves_tops_screen_out(image: str) -> None:
    version = in_image(image, "--version")
    assert version.returncode == 0
    assert version.stdout.startswith(f"kafka-quota-proxy {metadata.version('kafka-quota-proxy')} (")
    screen = in_image(image, "top", "--bootstrap-server", "kafka:9092", "--usage-topic", "usage")
    assert screen.returncode == 2
    assert "pip install 'kafka-quota-proxy[top]', or use --once" in screen.stderr
