"""A registry whose entries may live in modules loaded only when first needed.

The strategies of the seed papers' planners each register themselves in their own module;
listing the names (the command line's `--help` and choices) must not import them all. A
`LazyRegistry` knows which module registers each such name: asking for one of them (by key,
`get`, or the values) imports its module, whose registration fills the entry; names and
membership answer without importing anything.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Generic, TypeVar

V = TypeVar("V")


class LazyRegistry(dict[str, V], Generic[V]):
    """A dict of registered entries plus `lazy` names -> the module that registers them."""

    def __init__(self, lazy: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self._lazy = dict(lazy or {})

    def _load(self, name: str) -> None:
        module = self._lazy.pop(name, None)
        if module is not None:
            importlib.import_module(module)

    def load_all(self) -> None:
        for name in list(self._lazy):
            self._load(name)

    def __setitem__(self, name: str, value: V) -> None:
        self._lazy.pop(name, None)  # its module is being imported: it registers itself
        dict.__setitem__(self, name, value)

    def __missing__(self, name: str) -> V:
        if name in self._lazy:
            self._load(name)
            return dict.__getitem__(self, name)
        raise KeyError(name)

    def get(self, name: str, default: V | None = None) -> V | None:  # type: ignore[override]
        if name not in self:  # noqa: SIM401 - dict.get would not load a lazy entry
            return default
        return self[name]

    def __contains__(self, name: object) -> bool:
        return dict.__contains__(self, name) or name in self._lazy

    def __iter__(self) -> Iterator[str]:
        yield from dict.__iter__(self)
        yield from (name for name in list(self._lazy) if not dict.__contains__(self, name))

    def __len__(self) -> int:
        return len(set(dict.keys(self)) | set(self._lazy))

    def keys(self):  # type: ignore[override]
        return list(self)

    def values(self):  # type: ignore[override]
        self.load_all()
        return dict.values(self)

    def items(self):  # type: ignore[override]
        self.load_all()
        return dict.items(self)
