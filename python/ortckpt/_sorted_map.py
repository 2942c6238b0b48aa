"""``SortedMap``: the str-keyed mapping behind parameters, optimizer groups and momentum states."""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, MutableMapping
from typing import TypeVar

V = TypeVar("V")


class SortedMap(MutableMapping[str, V]):
    """A mapping over a private dict that iterates sorted by name, the order ORT writes these lists
    in. ``__setitem__`` stays abstract: each subclass validates and converts what it stores."""

    __slots__ = ("_items",)

    def __init__(self, items: MutableMapping[str, V] | None = None) -> None:
        # ``items`` is adopted, not copied: ParameterMap is a live view of the state's store.
        self._items: MutableMapping[str, V] = {} if items is None else items

    def __getitem__(self, key: str) -> V:
        return self._items[key]

    def __delitem__(self, key: str) -> None:
        del self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def _unsorted_items(self) -> ItemsView[str, V]:
        """The items in insertion order, without sorting or a lookup per key: for the writer,
        which sorts everything itself."""
        return self._items.items()
