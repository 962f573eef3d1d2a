"""Another host on this machine: a network namespace joined to this one by a veth pair, with
its own /etc/hosts (`ip netns exec` binds /etc/netns/NAME/hosts over /etc/hosts), so host
names resolve there without touching the machine's. Needs root; removed on exit."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Namespace:
    name: str
    #: this side's address on the pair (what the namespace reaches us at), and its own
    host_address: str
    address: str

    @property
    def wrapper(self) -> list[str]:
        """The command prefix that runs a program inside."""
        return ["ip", "netns", "exec", self.name]


def _ip(*args: str, check: bool = True) -> None:
    subprocess.run(["ip", *args], check=check, capture_output=True, timeout=30)


@contextmanager
def namespace(
    name: str, host_address: str, address: str, hosts: Mapping[str, str]
) -> Iterator[Namespace]:
    """A namespace `name` at `address`, reaching this one at `host_address` (a /30 between
    them), whose hosts file maps each name of `hosts` to its address."""
    etc = Path("/etc/netns") / name
    outside, inside = f"{name}-0", f"{name}-1"
    _remove(name, etc)  # what a run killed midway left
    try:
        _ip("netns", "add", name)
        _ip("netns", "exec", name, "ip", "link", "set", "lo", "up")
        _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
        _ip("link", "set", inside, "netns", name)
        _ip("addr", "add", f"{host_address}/30", "dev", outside)
        _ip("link", "set", outside, "up")
        _ip("netns", "exec", name, "ip", "addr", "add", f"{address}/30", "dev", inside)
        _ip("netns", "exec", name, "ip", "link", "set", inside, "up")
        etc.mkdir(parents=True)
        lines = ["127.0.0.1 localhost", *(f"{ip} {host}" for host, ip in hosts.items())]
        (etc / "hosts").write_text("\n".join(lines) + "\n")
        yield Namespace(name, host_address, address)
    finally:
        _remove(name, etc)


def _remove(name: str, etc: Path) -> None:
    _ip("netns", "del", name, check=False)  # its end of the pair goes with it, and so ours
    shutil.rmtree(etc, ignore_errors=True)
