"""Every member's region of one tensor as arrays, where each is one box or none: what
`regions.member_regions` computes over the members at once, kept as arrays so that the
covers (`redistribute._bounds`) and the costs' cache keys (`layout_costs.Costs`) read it
without the members' regions as tuples (building and reading back those tuples took
a fifth of ResNet-50's plan on 64 cubes)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np


@dataclass(frozen=True, eq=False)
class MemberBoxes:
    """Each member's one box of a tensor, or none (`empty`)."""

    bounds: np.ndarray  # int64 [members, axes, 2]; an empty member's all 0
    empty: np.ndarray  # bool [members]

    @classmethod
    def of(cls, bounds: np.ndarray, empty: np.ndarray) -> MemberBoxes:
        bounds = np.where(empty[:, None, None], 0, bounds).astype(np.int64)
        return cls(bounds, empty)

    def __len__(self) -> int:
        return len(self.empty)

    @cached_property
    def regions(self) -> tuple[tuple, ...]:
        """Every member's region as tuples (`redistribute.Region`, `regions.region`'s)."""
        return tuple(() if nothing else (tuple(map(tuple, box)),)
                     for box, nothing in zip(self.bounds.tolist(), self.empty.tolist(),
                                             strict=True))

    @cached_property
    def key(self) -> tuple:
        """Equal for equal regions of the same members (empty members' bounds are 0)."""
        return ("boxes", self.bounds.shape, self.bounds.tobytes(), self.empty.tobytes())

    def owned(self) -> tuple[np.ndarray, np.ndarray]:
        """(each box's member, [boxes, axes, 2] its bounds): the members that hold one."""
        held = ~self.empty
        return np.flatnonzero(held), self.bounds[held]

    def same_as(self, other: MemberBoxes) -> bool:
        """Whether both give every member the same region."""
        return self.key == other.key

    def all_differ(self) -> bool:
        """Whether no two members have the same region (two empty ones are alike)."""
        rows = np.concatenate([self.bounds.reshape(len(self), -1),
                               self.empty[:, None].astype(np.int64)], axis=1)
        return len({row.tobytes() for row in rows}) == len(rows)
