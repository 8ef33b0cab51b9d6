"""A hierarchy of levels: how an array of accelerators is grouped for partitioning.

Level 0 is the top. Level h splits each of its groups into `sizes[h]`
sub-groups, so the array has prod(sizes) members. A member's index is the
mixed-radix number of its coordinates, level 0 the most significant digit:
member = sum_h c_h * prod(sizes[h+1:]). Members that differ only in the
coordinate of level h form a *level-h group* of sizes[h] members; with every
level of size 2 this is HyPar's pairs (members a and a ^ 2**(H-h-1)).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from hypar_sim.errors import InputError, clip_value

#: Most members accepted (2**20 accelerators).
MAX_MEMBERS = 2**20


def prime_factors(count: int) -> tuple[int, ...]:
    """`count` as its prime factors, largest first (12 -> (3, 2, 2))."""
    factors, rest, p = [], count, 2
    while p * p <= rest:
        while rest % p == 0:
            factors.append(p)
            rest //= p
        p += 1
    if rest > 1:
        factors.append(rest)
    return tuple(sorted(factors, reverse=True))


@dataclass(frozen=True)
class Hierarchy:
    """Level sizes, top first; their product is the number of members."""

    sizes: tuple[int, ...]

    def __post_init__(self) -> None:
        for size in self.sizes:
            if isinstance(size, bool) or not isinstance(size, int) or size < 2:
                raise InputError(f"hierarchy: every level size must be an integer >= 2, "
                                 f"got {self.sizes}")
        if math.prod(self.sizes) > MAX_MEMBERS:
            raise InputError(f"hierarchy: {'x'.join(map(str, self.sizes))} has more than "
                             f"{MAX_MEMBERS} members")

    @classmethod
    def binary(cls, levels: int) -> Hierarchy:
        """`levels` two-way levels (HyPar's 2**H array)."""
        return cls((2,) * levels)

    @classmethod
    def for_count(cls, count: int) -> Hierarchy:
        """The default hierarchy of `count` members: its prime factors, largest first."""
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_MEMBERS:
            raise InputError(f"accelerators: must be an integer from 1 to {MAX_MEMBERS}, "
                             f"got {clip_value(count)}")
        return cls(prime_factors(count))

    @classmethod
    def parse(cls, text: str, count: int | None = None, where: str = "--hierarchy") -> Hierarchy:
        """'4x3x2' (or '4,3,2'); with `count`, the product must equal it."""
        words = text.lower().replace(",", "x").split("x")
        try:
            sizes = tuple(int(word) for word in words)
        except ValueError:
            raise InputError(f"{where}: '{text}' is not a list of level sizes such as 4x3x2") \
                from None
        if any(size < 2 for size in sizes):
            raise InputError(f"{where}: '{text}': every level size must be >= 2")
        hierarchy = cls(sizes)
        if count is not None and hierarchy.members != count:
            raise InputError(f"{where}: {text} has {hierarchy.members} members, but there are "
                             f"{count} accelerators; allowed: level sizes whose product is "
                             f"{count}, e.g. {'x'.join(map(str, prime_factors(count))) or '(none)'}")
        return hierarchy

    @property
    def levels(self) -> int:
        return len(self.sizes)

    @property
    def members(self) -> int:
        return math.prod(self.sizes)

    @cached_property
    def strides(self) -> tuple[int, ...]:
        """Index distance between neighbours of a level-h group: prod(sizes[h+1:])."""
        return tuple(math.prod(self.sizes[h + 1:]) for h in range(self.levels))

    def translations(self) -> list[np.ndarray]:
        """Per level of more than one member, the permutation of the members that moves
        their coordinate at that level on by one (modulo the level's size) and keeps the
        others: together they map every member to every other (`sim.symmetry`)."""
        index = np.arange(self.members)
        moved = []
        for size, stride in zip(self.sizes, self.strides, strict=True):
            if size > 1:
                digit = index // stride % size
                moved.append(index + ((digit + 1) % size - digit) * stride)
        return moved

    @property
    def is_binary(self) -> bool:
        return all(size == 2 for size in self.sizes)

    def coords(self, member: int) -> tuple[int, ...]:
        """The coordinate of `member` at every level, top first."""
        return tuple((member // stride) % size for stride, size in zip(self.strides, self.sizes,
                                                                       strict=True))

    def group(self, member: int, level: int) -> tuple[int, ...]:
        """The members of `member`'s level-`level` group, by coordinate at that level."""
        stride, size = self.strides[level], self.sizes[level]
        base = member - ((member // stride) % size) * stride
        return tuple(base + c * stride for c in range(size))

    def groups(self, level: int) -> Iterator[tuple[int, ...]]:
        """Every level-`level` group of the array."""
        stride, size = self.strides[level], self.sizes[level]
        for member in range(self.members):
            if (member // stride) % size == 0:
                yield self.group(member, level)

    def meeting_level(self, a: int, b: int) -> int:
        """The top-most level at which members `a` and `b` differ: the level whose groups
        pair them (a fat tree joins them at the switch of height levels - that)."""
        for level, stride in enumerate(self.strides):
            if a // stride != b // stride:
                return level
        raise ValueError(f"members {a} and {b} are the same member")

    def meeting_levels(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """`meeting_level` of many pairs at once (members a[i] != b[i]). Where every stride
        is a power of two, a pair meets at the first level whose stride is at most a XOR b
        (the levels above it have strides beyond the highest bit in which they differ)."""
        if all(stride & (stride - 1) == 0 for stride in self.strides):
            differ = np.bitwise_xor(a, b)
            if np.any(differ == 0):
                raise ValueError("meeting_levels: a pair of the same member")
            ascending = np.array(self.strides[::-1], dtype=np.int64)
            return self.levels - np.searchsorted(ascending, differ, side="right")
        result = np.full(len(a), -1, dtype=np.int64)
        for level in reversed(range(self.levels)):
            stride = self.strides[level]
            result[a // stride != b // stride] = level
        if np.any(result < 0):
            raise ValueError("meeting_levels: a pair of the same member")
        return result

    @cached_property
    def subarray_counts(self) -> tuple[int, ...]:
        """Groups of sub-arrays split at each level: prod(sizes[:level]) (HyPar's 2**h
        pairs)."""
        return tuple(math.prod(self.sizes[:level]) for level in range(self.levels))

    def __str__(self) -> str:
        return "x".join(map(str, self.sizes)) if self.sizes else "1"


def as_hierarchy(levels_or_hierarchy: int | Hierarchy) -> Hierarchy:
    """A Hierarchy, or an int number of two-way levels (HyPar's 2**H array)."""
    if isinstance(levels_or_hierarchy, Hierarchy):
        return levels_or_hierarchy
    levels = levels_or_hierarchy
    if isinstance(levels, bool) or not isinstance(levels, int) or not 0 <= levels <= 20:
        raise InputError(f"levels: must be an integer from 0 to 20, got {clip_value(levels)}")
    return Hierarchy.binary(levels)
