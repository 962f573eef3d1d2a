"""Whether a proxy listener serves, refuses, or accepts and closes: what a client meets."""

from __future__ import annotations

import asyncio
import struct
import time

API_VERSIONS_V0 = struct.pack(">hhih", 18, 0, 1, 1) + b"c"


async def answered(address: str) -> bool | None:
    """True: answered ApiVersions; False: accepted then closed; None: connection refused."""
    host, port = address.rsplit(":", 1)
    try:
        reader, writer = await asyncio.open_connection(host, int(port))
    except ConnectionRefusedError:
        return None
    writer.write(struct.pack(">i", len(API_VERSIONS_V0)) + API_VERSIONS_V0)
    try:
        return len(await asyncio.wait_for(reader.read(4), 10)) == 4
    except ConnectionResetError:
        return False
    finally:
        writer.close()


async def served(address: str, source: str, keep: list[asyncio.StreamWriter] | None = None) -> bool:
    """Connect from `source`, send ApiVersions: True if answered, False if closed unanswered;
    an answered connection is kept open in `keep` when given."""
    host, port = address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port), local_addr=(source, 0))
    writer.write(struct.pack(">i", len(API_VERSIONS_V0)) + API_VERSIONS_V0)
    try:
        answered = len(await asyncio.wait_for(reader.read(4), 10)) == 4
    except ConnectionResetError:
        answered = False
    if keep is not None and answered:
        keep.append(writer)
    else:
        writer.close()
    return answered


async def until(condition: object, address: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (result := await answered(address)) is not condition:
        assert time.monotonic() < deadline, f"{address} gave {result}, not {condition}"
        await asyncio.sleep(0.2)
