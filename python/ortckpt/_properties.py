"""``PropertyBag``: the checkpoint's user properties (int64, float32 or str values)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, MutableMapping

from ._scalars import PropertyValue, check_name, to_property_value

PropertyInput = Mapping[str, object] | Iterable[tuple[str, object]]


class PropertyBag(MutableMapping[str, PropertyValue]):
    """A dict of property name -> value, validated as ORT stores them.

    * ``int`` (numpy integers accepted, ``bool`` rejected) must fit a signed 64-bit integer;
    * ``float`` (numpy floats accepted) is stored as float32, so the value read back is
      ``float(np.float32(value))``;
    * ``str``.

    Iteration follows insertion order (the file order for loaded checkpoints: ints, floats,
    strings); files are written sorted by name.
    """

    __slots__ = ("_items",)

    def __init__(self, items: PropertyInput | None = None, /) -> None:
        self._items: dict[str, PropertyValue] = {}
        if items is not None:
            pairs = items.items() if isinstance(items, Mapping) else items
            for key, value in pairs:
                self[key] = value

    def __getitem__(self, key: str) -> PropertyValue:
        return self._items[key]

    def __setitem__(self, key: str, value: object) -> None:
        name = check_name(key, "property")
        self._items[name] = to_property_value(value, name)

    def __delitem__(self, key: str) -> None:
        del self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __repr__(self) -> str:
        return f"PropertyBag({self._items!r})"
