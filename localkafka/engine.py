"""A container engine for the suite where no image registry is reachable: podman (with runc),
driven by Debian's docker-compose through podman's Docker-compatible socket, and the images
docker-compose.yml names made from Debian's packages and Maven Central.

- The base: `debootstrap --variant=minbase` of Debian 12 with Python and Java 17, and the
  machine's CA bundle (pip inside a build reaches PyPI through it), imported as BASE. The
  root file system is kept as a tarball in .cache/images, so a machine whose podman storage
  was wiped imports it again in seconds.
- Kafka: the jars localkafka fetches, started from apache/kafka's KAFKA_* variables.
- Prometheus: Debian's package, the version docker-compose.yml pins.

Users keep the public images: docker-compose.yml reads KAFKA_IMAGE, PROMETHEUS_IMAGE and
PYTHON_IMAGE (the proxy's base, a build argument), each defaulting to the public one, and
`substitutes()` gives the suite's.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from localkafka.jars import CACHE as JARS_CACHE
from localkafka.jars import ensure_jars, kafka_version

CACHE: Final = JARS_CACHE / "images"
HERE: Final = Path(__file__).resolve().parent
BASE: Final = "localhost/kqp-debian:bookworm"
PROMETHEUS_DEB: Final = JARS_CACHE / "prometheus" / "usr" / "bin"
#: the packages of the base: the proxy's Python, Kafka's Java, pip's certificates
_PACKAGES: Final = "python3,python3-venv,ca-certificates,openjdk-17-jre-headless"
_MIRROR: Final = "http://deb.debian.org/debian"
_CA_BUNDLE: Final = Path("/etc/ssl/certs/ca-certificates.crt")


def podman(*args: str, timeout: float = 600, check: bool = True) -> str:
    result = subprocess.run(
        ["podman", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and result.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout


def _exists(image: str) -> bool:
    return subprocess.run(["podman", "image", "exists", image], check=False).returncode == 0


def _recipe(*names: str) -> str:
    """A tag suffix from what an image is made of here, so that an edited Containerfile or
    script makes a new image rather than a stale one found by its name."""
    digest = hashlib.sha256()
    for name in names:
        digest.update((HERE / "images" / name).read_bytes())
    return digest.hexdigest()[:10]


def kafka_image() -> str:
    recipe = _recipe("kafka.Containerfile", "kafka-run.sh", "kafka-broker-api-versions.sh")
    return f"localhost/kqp-kafka:{kafka_version()}-{recipe}"


def prometheus_version() -> str:
    """Debian's Prometheus, as `prometheus --version` names it ("2.42.0+ds" is 2.42.0)."""
    words = subprocess.run(
        [str(PROMETHEUS_DEB / "prometheus"), "--version"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return words[2].split("+")[0]


def prometheus_image() -> str:
    return f"localhost/kqp-prometheus:{prometheus_version()}-{_recipe('prometheus.Containerfile')}"


def ensure_base() -> str:
    """BASE, imported from the cached root file system, made first when missing."""
    if _exists(BASE):
        return BASE
    tarball = CACHE / "debian-bookworm.tar"
    if not tarball.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=CACHE) as work:
            rootfs = Path(work) / "rootfs"
            subprocess.run(
                [
                    "debootstrap",
                    "--variant=minbase",
                    f"--include={_PACKAGES}",
                    "bookworm",
                    str(rootfs),
                    _MIRROR,
                ],
                check=True,
                stdout=subprocess.DEVNULL,
                timeout=900,
            )
            shutil.copyfile(_CA_BUNDLE, rootfs / "etc" / "ssl" / "certs" / _CA_BUNDLE.name)
            partial = tarball.with_suffix(".partial")
            subprocess.run(["tar", "-C", str(rootfs), "-cf", str(partial), "."], check=True)
            partial.rename(tarball)
    podman("import", "--quiet", str(tarball), BASE)
    return BASE


def _build(image: str, containerfile: str, files: dict[str, Path]) -> None:
    """`image` from localkafka/images/`containerfile`, with `files` (name -> path) as its
    context."""
    with tempfile.TemporaryDirectory(dir=CACHE) as context:
        for name, path in files.items():
            target = Path(context) / name
            if path.is_dir():
                shutil.copytree(path, target)
            else:
                shutil.copy2(path, target)
        podman(
            "build",
            "--quiet",
            "--format",
            "docker",
            "--build-arg",
            f"BASE={BASE}",
            "--file",
            str(HERE / "images" / containerfile),
            "--tag",
            image,
            context,
        )


def ensure_images() -> dict[str, str]:
    """Every substitute image, made when missing; what docker-compose.yml reads to use them."""
    ensure_base()
    kafka = kafka_image()
    if not _exists(kafka):
        images = HERE / "images"
        _build(
            kafka,
            "kafka.Containerfile",
            {
                "libs": ensure_jars(),
                "log4j2.properties": HERE / "log4j2.properties",
                "kafka-run.sh": images / "kafka-run.sh",
                "kafka-broker-api-versions.sh": images / "kafka-broker-api-versions.sh",
            },
        )
    prometheus = prometheus_image()
    if not _exists(prometheus):
        _build(
            prometheus,
            "prometheus.Containerfile",
            {name: PROMETHEUS_DEB / name for name in ("prometheus", "promtool")},
        )
    return substitutes()


def substitutes() -> dict[str, str]:
    """The environment docker-compose.yml takes the suite's images from."""
    return {
        "KAFKA_IMAGE": kafka_image(),
        "PROMETHEUS_IMAGE": prometheus_image(),
        "PYTHON_IMAGE": BASE,
    }


@contextmanager
def docker_socket(directory: Path) -> Iterator[str]:
    """podman's Docker-compatible API on a socket of its own while the block runs: the
    DOCKER_HOST for docker-compose."""
    socket = directory / "podman.sock"
    with (directory / "podman-service.log").open("wb") as log:
        service = subprocess.Popen(
            ["podman", "system", "service", "--time=0", f"unix://{socket}"],
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    try:
        deadline = time.monotonic() + 30
        while not socket.exists():
            if service.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"podman system service did not open {socket}")
            time.sleep(0.1)
        yield f"unix://{socket}"
    finally:
        service.terminate()
        try:
            service.wait(timeout=30)
        except subprocess.TimeoutExpired:
            service.kill()
            service.wait()


def environment(docker_host: str) -> dict[str, str]:
    return {**os.environ, "DOCKER_HOST": docker_host, **substitutes()}
