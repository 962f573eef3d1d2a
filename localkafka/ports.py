"""Free loopback ports for brokers, proxies and tools, outside the kernel's ephemeral range
where one can be had, so a client's outgoing connection never takes a port a test is about
to listen on."""

from __future__ import annotations

import random
import socket
from pathlib import Path

LOOPBACK = "127.0.0.1"


_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


#: ports this process has handed out: a port is given once, so two listeners that have not
#: bound yet can never be given the same one
_HANDED_OUT: set[int] = set()


def _listener_port_range() -> range:
    """Ports below the kernel's ephemeral range.

    A port taken with bind(0) and released lies in the ephemeral range, where any outgoing
    connection (a Kafka node dialling its voters, a client) may take it before the listener
    binds: a CI run lost node 2 of three to "Address already in use" that way. Ports below the
    range are only ever taken by a deliberate bind, which the reservation below checks.
    """
    try:
        low = int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return range(10000, low) if low > 11000 else range(low - 1000, low)


def free_ports(count: int, *, contiguous: bool = False, host: str = LOOPBACK) -> list[int]:
    """`count` distinct ports free on `host` now, outside the ephemeral range, never handed out
    before by this process; `contiguous` asks for consecutive ones (a proxy's broker listeners)."""
    candidates = _listener_port_range()
    rng = random.Random()
    for _ in range(500):
        if contiguous:
            start = rng.randrange(candidates.start, candidates.stop - count)
            ports = list(range(start, start + count))
        else:
            ports = rng.sample(candidates, count)
        if _HANDED_OUT.intersection(ports):
            continue
        sockets: list[socket.socket] = []
        try:
            for port in ports:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sockets.append(sock)
                sock.bind((host, port))
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
        _HANDED_OUT.update(ports)
        return ports
    raise RuntimeError(f"no {count} free ports on {host} in {candidates}")


def free_port(host: str = LOOPBACK) -> int:
    return free_ports(1, host=host)[0]
