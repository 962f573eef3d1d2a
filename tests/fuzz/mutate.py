"""Mutations of captured requests for the network fuzzer.

libFuzzer's mutator (atheris.Mutate) only runs inside its own fuzzing loop, and the network
fuzzer's target is another process, so it mutates with these: libFuzzer's basic moves
(flip, erase, insert, copy, interesting integers, cross-over), seeded, reproducible.
"""

from __future__ import annotations

import random
import struct

#: the values a size, count or length field goes wrong with
INTERESTING = (0, 1, -1, 0x7F, 0x80, 0xFF, 0x7FFF, -0x8000, 0x7FFFFFFF, -0x80000000)


def _flip(rng: random.Random, data: bytearray, other: bytes) -> None:
    data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)


def _set_byte(rng: random.Random, data: bytearray, other: bytes) -> None:
    data[rng.randrange(len(data))] = rng.randrange(256)


def _erase(rng: random.Random, data: bytearray, other: bytes) -> None:
    start = rng.randrange(len(data))
    del data[start : start + rng.randint(1, 16)]


def _insert(rng: random.Random, data: bytearray, other: bytes) -> None:
    data[rng.randrange(len(data) + 1) : 0] = rng.randbytes(rng.randint(1, 16))


def _copy(rng: random.Random, data: bytearray, other: bytes) -> None:
    start = rng.randrange(len(data))
    chunk = data[start : start + rng.randint(1, 32)]
    data[rng.randrange(len(data) + 1) : 0] = chunk


def _integer(rng: random.Random, data: bytearray, other: bytes) -> None:
    width = rng.choice((1, 2, 4))
    if len(data) >= width:
        at = rng.randrange(len(data) - width + 1)
        value = rng.choice(INTERESTING) & ((1 << 8 * width) - 1)
        data[at : at + width] = value.to_bytes(width, "big")


def _cross_over(rng: random.Random, data: bytearray, other: bytes) -> None:
    if other:
        start = rng.randrange(len(other))
        data[rng.randrange(len(data) + 1) :] = other[start : start + rng.randint(1, 256)]


MUTATIONS = (_flip, _set_byte, _erase, _insert, _copy, _integer, _cross_over)


def mutate(rng: random.Random, seed: bytes, other: bytes, moves: int = 0) -> bytes:
    """`seed` after 1-5 random moves (or `moves`)."""
    data = bytearray(seed or b"\x00")
    for _ in range(moves or rng.randint(1, 5)):
        if not data:
            data.append(0)
        rng.choice(MUTATIONS)(rng, data, other)
    return bytes(data)


def with_size_prefix(data: bytes) -> bytes:
    """The mutated bytes behind their own correct size prefix, so they reach the decoders
    instead of stopping at framing."""
    body = data[4:]
    return struct.pack(">i", len(body)) + body
