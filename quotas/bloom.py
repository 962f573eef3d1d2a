"""A time-layered Bloom filter: which producer ids a user has used lately (KIP-936).

KIP-936 tracks each user's producer ids in Apache Commons' LayeredBloomFilter: a new layer
every window / layer_count, a layer that fills before its time followed by a new one, layers
dropped once a window old. A lookup checks every live layer, so the whole filter's false
positive rate is 1 - (1 - p_layer)^layers; each layer is sized so that with layer_count + 1
live layers (the oldest is dropped only when its successor's successor has arrived) the
whole stays within the configured rate.

Positions come from enhanced double hashing (Dillinger and Manolios, as Commons'
EnhancedDoubleHasher) over the two halves of a 128-bit murmur3 hash, so the k positions of an
id cost one hash. Sans-IO: the caller passes the time.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from struct import Struct
from typing import Final, NamedTuple

import mmh3

_ID: Final = Struct(">q")
_LN2_SQUARED: Final = math.log(2) ** 2
#: enough for a false-positive rate of 1e-19
_MAX_HASHES: Final = 64


class BloomShape(NamedTuple):
    """Commons' Shape.fromNP: the bits and hash count for `capacity` items at a rate."""

    bits: int
    hashes: int
    #: items after which the layer counts as full and a new one is started
    capacity: int

    @classmethod
    def for_items(cls, capacity: int, false_positive_rate: float) -> BloomShape:
        capacity = max(capacity, 1)
        bits = math.ceil(-capacity * math.log(false_positive_rate) / _LN2_SQUARED)
        hashes = min(max(1, round(bits / capacity * math.log(2))), _MAX_HASHES)
        return cls(bits, hashes, capacity)

    @property
    def size_bytes(self) -> int:
        return (self.bits + 7) // 8


def layer_false_positive_rate(false_positive_rate: float, layer_count: int) -> float:
    """The rate each layer may have so that layer_count + 1 live layers together meet
    `false_positive_rate`: the window's layers and the one that replaces the oldest."""
    return 1.0 - float((1 - false_positive_rate) ** (1 / (layer_count + 1)))


#: (i, (i^3 - i) / 6) for each hash i: enhanced double hashing's increments, in closed form
_STEPS: Final = tuple((i, (i**3 - i) // 6) for i in range(_MAX_HASHES))


def positions(item: int, shape: BloomShape) -> list[int]:
    """The bits an id sets: index_i = h1 + i*h2 + (i^3 - i)/6, modulo the bits."""
    h1, h2 = mmh3.hash64(_ID.pack(item), 0, False)
    bits = shape.bits
    h1 %= bits
    h2 %= bits
    return [(h1 + i * h2 + cube) % bits for i, cube in _STEPS[: shape.hashes]]


class _Layer:
    __slots__ = ("bits", "count", "created_ms", "shape")

    def __init__(self, shape: BloomShape, created_ms: int) -> None:
        self.shape = shape
        self.bits = bytearray(shape.size_bytes)
        self.count = 0
        self.created_ms = created_ms

    def contains(self, at: list[int]) -> bool:
        bits = self.bits
        for position in at:  # noqa: SIM110 (all() over a generator costs twice this loop)
            if not bits[position >> 3] & (1 << (position & 7)):
                return False
        return True

    def add(self, at: list[int]) -> None:
        bits = self.bits
        for position in at:
            bits[position >> 3] |= 1 << (position & 7)
        self.count += 1


class LayeredBloomFilter:
    """One user's producer ids of the last window, newest layer last."""

    __slots__ = ("_layer_ms", "_layers", "_window_ms")

    def __init__(self, window_ms: int, layer_count: int) -> None:
        self._window_ms = window_ms
        self._layer_ms = max(window_ms // layer_count, 1)
        self._layers: list[_Layer] = []

    def seen(self, item: int, at: list[int], shape: BloomShape, now_ms: int) -> bool:
        """Whether the id (`at` its positions in `shape`) is in a live layer. One found only
        in older layers is added to the newest, so a producer that keeps producing never
        ages out and never looks new."""
        layers = self._layers
        if layers and now_ms - layers[0].created_ms >= self._window_ms:
            self.expire(now_ms)
        for layer in reversed(layers):
            # a reload may change a user's rate, and layers keep the shape they were made with
            if not layer.contains(at if layer.shape == shape else positions(item, layer.shape)):
                continue
            if layer is not layers[-1] or now_ms - layer.created_ms >= self._layer_ms:
                self._newest(shape, now_ms).add(at)
            return True
        return False

    def add(self, at: list[int], shape: BloomShape, now_ms: int) -> None:
        """Record a new id in the newest layer (started afresh when due or full)."""
        self._newest(shape, now_ms).add(at)

    def expire(self, now_ms: int) -> int:
        """Drop layers a window old; returns the bytes freed."""
        layers, freed = self._layers, 0
        while layers and now_ms - layers[0].created_ms >= self._window_ms:
            freed += len(layers.pop(0).bits)
        return freed

    @property
    def empty(self) -> bool:
        return not self._layers

    @property
    def size_bytes(self) -> int:
        return sum(len(layer.bits) for layer in self._layers)

    @property
    def newest_ms(self) -> int | None:
        """When the newest layer was started: the filter is empty a window after it."""
        return self._layers[-1].created_ms if self._layers else None

    def current_layer(self, now_ms: int) -> object | None:
        """The newest layer while new ids and carried ones still go to it, as a token: ids
        found or added while it is current need no second look until it changes."""
        layers = self._layers
        if layers and now_ms - layers[-1].created_ms < self._layer_ms:
            return layers[-1]
        return None

    def layers(self) -> Iterator[tuple[int, int]]:
        """(created_ms, ids added) of each live layer, oldest first: for tests and reports."""
        return ((layer.created_ms, layer.count) for layer in self._layers)

    def _needs_layer(self, now_ms: int) -> bool:
        newest = self._layers[-1] if self._layers else None
        return (
            newest is None
            or now_ms - newest.created_ms >= self._layer_ms
            or newest.count >= newest.shape.capacity
        )

    def _newest(self, shape: BloomShape, now_ms: int) -> _Layer:
        if self._needs_layer(now_ms) or self._layers[-1].shape != shape:
            self._layers.append(_Layer(shape, now_ms))
        return self._layers[-1]
