"""A time-layered Bloom filter: which producer ids a user has used lately (KIP-936).

KIP-936 tracks each user's producer ids in Apache Commons' LayeredBloomFilter: a new layer
every window / layer_count (a time slot), a layer that fills before its time followed by a new
one, layers dropped once a window old. A lookup checks every live layer; at most layer_count
slots are live, so each layer gets 1 - (1 - p)^(1 / layer_count) and, while no slot overflows,
the filter as a whole stays within the configured rate p.

An id found only in an earlier slot is added to the current one, so a producer that keeps
producing never ages out: once per slot, whatever layer of the slot holds it. A slot's first
layer is sized for the ids the previous slot held plus the user's rate (every live producer
is carried over, and the quota admits at most a rate's worth of new ones), so the filter
follows the live set rather than growing a layer per carried id. Memory is allocated for ids
actually seen, never up front from a rate: a rate of 2^31 costs nothing until it is used.

Positions come from enhanced double hashing (Dillinger and Manolios, as Commons'
EnhancedDoubleHasher) over the two halves of murmur3's x64 128-bit hash, so the k positions of
an id cost one hash. Sans-IO: the caller passes the time.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from functools import lru_cache
from struct import Struct
from typing import Final, NamedTuple

import mmh3

_ID: Final = Struct(">q")
#: enough for a false-positive rate of 1e-19
_MAX_HASHES: Final = 64
#: the most ids a layer is made for (2.3 MB at 0.1 % over 4 layers); more go to further layers
MAX_LAYER_IDS: Final = 1 << 20

#: an id's two 64-bit hashes, from which every layer's positions derive
Hashed = tuple[int, int]


class BloomShape(NamedTuple):
    """The bits and hash count for `capacity` items at no more than a false-positive rate.

    Commons' Shape.fromNP sizes the bits for the ideal, fractional hash count and then rounds
    the count, which leaves a full filter a little over its rate (1.003 % for 1 %); here the
    bits are sized for the rounded count, so a full filter meets the rate exactly.
    """

    bits: int
    hashes: int
    #: items after which the layer counts as full and a new one is started
    capacity: int

    @classmethod
    def for_items(cls, capacity: int, false_positive_rate: float) -> BloomShape:
        capacity = max(capacity, 1)
        hashes = min(max(1, round(-math.log2(false_positive_rate))), _MAX_HASHES)
        # (1 - e^(-k n / m))^k = p, solved for m
        per_hash = false_positive_rate ** (1 / hashes)
        bits = math.ceil(-hashes * capacity / math.log1p(-per_hash))
        return cls(bits, hashes, capacity)

    @property
    def size_bytes(self) -> int:
        return (self.bits + 7) // 8


_shape: Final = lru_cache(maxsize=256)(BloomShape.for_items)


def layer_false_positive_rate(false_positive_rate: float, layer_count: int) -> float:
    """The rate each layer may have so that layer_count of them meet the whole's rate."""
    return 1.0 - float((1 - false_positive_rate) ** (1 / layer_count))


def hashed(item: int) -> Hashed:
    h1, h2 = mmh3.hash64(_ID.pack(item), 0, True, False)
    return h1, h2


#: (i, (i^3 - i) / 6) for each hash i: enhanced double hashing's increments, in closed form
_STEPS: Final = tuple((i, (i**3 - i) // 6) for i in range(_MAX_HASHES))


def positions(item: Hashed, shape: BloomShape) -> list[int]:
    """The bits an id sets: index_i = h1 + i*h2 + (i^3 - i)/6, modulo the bits."""
    bits = shape.bits
    h1, h2 = item[0] % bits, item[1] % bits
    return [(h1 + i * h2 + cube) % bits for i, cube in _STEPS[: shape.hashes]]


class _Layer:
    __slots__ = ("bits", "count", "created_ms", "shape", "slot")

    def __init__(self, shape: BloomShape, created_ms: int, slot: _Layer | None) -> None:
        self.shape = shape
        self.bits = bytearray(shape.size_bytes)
        self.count = 0
        self.created_ms = created_ms
        #: the first layer of this layer's time slot (itself, unless started because full)
        self.slot: _Layer = self if slot is None else slot

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

    __slots__ = ("_false_positive_rate", "_layer_ms", "_layers", "_looked_up", "_window_ms")

    def __init__(self, window_ms: int, layer_count: int, false_positive_rate: float) -> None:
        self._window_ms = window_ms
        self._layer_ms = max(window_ms // layer_count, 1)
        self._false_positive_rate = layer_false_positive_rate(false_positive_rate, layer_count)
        self._layers: list[_Layer] = []
        #: the last id looked up and its positions in the newest layer's size: an unseen id
        #: is usually added next, and computing them again was a third of check-and-add
        self._looked_up: tuple[Hashed, int, list[int]] | None = None

    def seen(self, item: Hashed, new_ids: int, now_ms: int) -> bool:
        """Whether the id is in a live layer; one found only in an earlier slot is added to
        the current one. `new_ids`: how many new ids a slot may add (the user's rate)."""
        layers = self._layers
        if layers and now_ms - layers[0].created_ms >= self._window_ms:
            self.expire(now_ms)
        layer = self._find(item)
        if layer is None:
            return False
        if layer.slot is not self.current_slot(now_ms):
            self.add(item, new_ids, now_ms)
        return True

    def contains(self, item: Hashed) -> bool:
        """Whether a live layer holds the id, changing nothing: what a false-positive rate
        is measured on."""
        return self._find(item) is not None

    def add(self, item: Hashed, new_ids: int, now_ms: int) -> None:
        """Record an id in the current slot's newest layer, started afresh when due or full."""
        layer = self._newest(new_ids, now_ms)
        looked_up = self._looked_up
        if looked_up is not None and looked_up[0] is item and looked_up[1] == layer.shape.bits:
            layer.add(looked_up[2])
        else:
            layer.add(positions(item, layer.shape))

    def expire(self, now_ms: int) -> int:
        """Drop layers a window old; returns the bytes freed."""
        layers, freed = self._layers, 0
        while layers and now_ms - layers[0].created_ms >= self._window_ms:
            freed += len(layers.pop(0).bits)
        return freed

    @property
    def size_bytes(self) -> int:
        return sum(len(layer.bits) for layer in self._layers)

    @property
    def newest_ms(self) -> int | None:
        """When the newest layer was started: the filter is empty a window after it."""
        return self._layers[-1].created_ms if self._layers else None

    def layers(self) -> Iterator[tuple[int, int, int]]:
        """(created_ms, ids added, capacity) of each live layer, oldest first."""
        return ((layer.created_ms, layer.count, layer.shape.capacity) for layer in self._layers)

    def _find(self, item: Hashed) -> _Layer | None:
        """The newest layer holding the id. Layers of one slot share a size, so positions
        are computed again only where the size changes."""
        at: list[int] = []
        bits = 0
        for layer in reversed(self._layers):
            shape = layer.shape
            if shape.bits != bits:
                bits = shape.bits
                at = positions(item, shape)
                if layer is self._layers[-1]:
                    self._looked_up = (item, bits, at)
            if layer.contains(at):
                return layer
        return None

    def current_slot(self, now_ms: int) -> _Layer | None:
        """The current time slot (its first layer), or None when the next id starts one: ids
        found or added in it need no second look until the slot changes."""
        if self._layers:
            slot = self._layers[-1].slot
            if now_ms - slot.created_ms < self._layer_ms:
                return slot
        return None

    def _newest(self, new_ids: int, now_ms: int) -> _Layer:
        layers = self._layers
        slot = self.current_slot(now_ms)
        if slot is None:  # a new time slot: room for what the last one held, and new ids
            previous = layers[-1].slot if layers else None
            held = sum(layer.count for layer in layers if layer.slot is previous)
            capacity = min(held + new_ids, MAX_LAYER_IDS)
        elif layers[-1].count >= layers[-1].shape.capacity:  # full before its time
            capacity = min(2 * layers[-1].shape.capacity, MAX_LAYER_IDS)
        else:
            return layers[-1]
        layer = _Layer(_shape(capacity, self._false_positive_rate), now_ms, slot)
        layers.append(layer)
        return layer
