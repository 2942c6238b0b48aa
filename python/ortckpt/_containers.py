"""The mappings a ``CheckpointState`` is made of: its parameter store and the views over it.

``ParameterStore`` holds the state's parameters. For a loaded checkpoint it starts as the native
index alone — no Python object per tensor — and creates a ``Parameter`` only when one is asked for
(a checkpoint of 400k tensors loads without 400k Python objects). Parameters that are set, edited
or asked for are kept in a plain dict that overrides the index; removed ones are remembered by name.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, ItemsView, Iterator, Mapping, MutableMapping
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any

from ._optimizer import OptimizerGroup
from ._parameter import Parameter, tensor_of
from ._scalars import check_name
from ._sorted_map import SortedMap

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, NDArray

    from ._native import Index, TensorRecord, TensorSpec

    #: Makes the ``Parameter`` for one index record (the loader supplies it: it knows the buffers).
    ParameterMaker = Callable[[TensorRecord], Parameter]
    #: The values of every indexed parameter not named in the given set, sorted by name, in one pass.
    ArraysMaker = Callable[[AbstractSet[str]], dict[str, NDArray[Any]]]


class ParameterStore(MutableMapping[str, Parameter]):
    """name -> ``Parameter``, backed by a native index (if loaded) plus a dict of overrides."""

    __slots__ = ("_extra", "_index", "_make", "_make_arrays", "_own", "_removed")

    def __init__(
        self,
        own: dict[str, Parameter] | None = None,
        index: Index | None = None,
        make: ParameterMaker | None = None,
        make_arrays: ArraysMaker | None = None,
    ) -> None:
        self._own: dict[str, Parameter] = {} if own is None else own
        self._index = index
        self._make = make
        self._make_arrays = make_arrays
        self._removed: set[str] = set()
        # names in ``_own`` that the index does not hold (kept so len() needs no scan)
        self._extra = len(self._own)

    def _indexed(self, name: str) -> bool:
        return (
            self._index is not None
            and name not in self._removed
            and self._index.is_trainable(name) is not None
        )

    def __getitem__(self, name: str) -> Parameter:
        param = self._own.get(name)
        if param is not None:
            return param
        if not isinstance(name, str) or self._index is None or self._make is None or name in self._removed:
            raise KeyError(name)
        record = self._index.parameter(name)
        if record is None:
            raise KeyError(name)
        param = self._own[name] = self._make(record)
        return param

    def __setitem__(self, name: str, param: Parameter) -> None:
        if name not in self._own:
            if self._indexed(name):
                pass
            elif self._index is not None and name in self._removed:
                self._removed.discard(name)
            else:
                self._extra += 1
        self._own[name] = param

    def __delitem__(self, name: str) -> None:
        indexed = self._indexed(name)
        if name in self._own:
            del self._own[name]
            if not indexed:
                self._extra -= 1
        elif not indexed:
            raise KeyError(name)
        if indexed:
            self._removed.add(name)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self._own or self._indexed(name))

    def __len__(self) -> int:
        indexed = 0 if self._index is None else self._index.parameter_count() - len(self._removed)
        return indexed + self._extra

    def __iter__(self) -> Iterator[str]:
        """Names in sorted order."""
        if self._index is None:
            return iter(sorted(self._own))
        removed = self._removed
        indexed = (n for n in self._index.parameter_names() if n not in removed)
        extra = sorted(n for n in self._own if self._index.is_trainable(n) is None)
        return heapq.merge(indexed, extra)

    def arrays(self) -> dict[str, NDArray[Any]]:
        """Every parameter's values, sorted by name; indexed parameters nobody asked for yet are
        read in one pass, without a ``Parameter`` each."""
        own = {name: param.data for name, param in self._own.items()}
        if self._make_arrays is None:
            return {name: own[name] for name in sorted(own)}
        loaded = self._make_arrays(self._removed | own.keys())
        if not own:
            return loaded
        loaded.update(own)
        return {name: loaded[name] for name in sorted(loaded)}

    def save_parts(self) -> tuple[list[tuple[bool, TensorSpec]], ItemsView[str, Parameter]]:
        """What a save writes, in two parts: the writer's specs of every indexed parameter nobody
        asked for yet, made in one native call, without a ``Parameter`` each (with its trainable
        flag), and the parameters the state holds itself."""
        if self._index is None:
            return [], self._own.items()
        return self._index.parameter_specs(self._removed | self._own.keys()), self._own.items()

    def is_trainable(self, name: str) -> bool:
        """The trainable flag of ``name`` without creating its ``Parameter``."""
        param = self._own.get(name)
        if param is not None:
            return param.trainable
        flag = None if self._index is None or name in self._removed else self._index.is_trainable(name)
        if flag is None:
            raise KeyError(name)
        return flag


def _own(param: Parameter, trainable: bool | None = None) -> Parameter:
    """A state-owned wrapper sharing ``param``'s (immutable) tensor."""
    flag = param.trainable if trainable is None else trainable
    return Parameter._from_tensor(param.name, tensor_of(param), flag, param.doc_string)


class ParameterMap(SortedMap[Parameter]):
    """All parameters of a state, name -> ``Parameter``, iterating sorted by name.

    Assigning an array adds a trainable parameter, or replaces the values (any shape or dtype) of an
    existing one keeping its trainable flag. Assigning a ``Parameter`` stores it under its own name
    (the state keeps its own wrapper around the parameter's data).
    """

    __slots__ = ()

    _items: ParameterStore

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)  # the store iterates sorted already

    def _save_parts(self) -> tuple[list[tuple[bool, TensorSpec]], ItemsView[str, Parameter]]:
        """``ParameterStore.save_parts``: the untouched loaded parameters in one native call."""
        return self._items.save_parts()

    def __setitem__(self, key: str, value: ArrayLike | Parameter) -> None:
        name = check_name(key, "parameter")
        if isinstance(value, Parameter):
            if value.name != name:
                raise ValueError(f"cannot store Parameter named {value.name!r} under key {name!r}")
            self._items[name] = _own(value)
        else:
            trainable = self._items.is_trainable(name) if name in self._items else True
            self._items[name] = Parameter(name, value, trainable=trainable)

    def __repr__(self) -> str:
        return f"ParameterMap({[self._items[n] for n in self]!r})"


class ParameterView(Mapping[str, Parameter]):
    """Read-only live view of the trainable (or the frozen) parameters, sorted by name."""

    __slots__ = ("_params", "_trainable")

    def __init__(self, params: ParameterStore, trainable: bool) -> None:
        self._params = params
        self._trainable = trainable

    def __getitem__(self, key: str) -> Parameter:
        if key not in self:
            raise KeyError(key)
        return self._params[key]

    def __iter__(self) -> Iterator[str]:
        params = self._params
        return (n for n in params if params.is_trainable(n) == self._trainable)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, key: object) -> bool:
        return (
            isinstance(key, str) and key in self._params and self._params.is_trainable(key) == self._trainable
        )

    def __repr__(self) -> str:
        kind = "trainable" if self._trainable else "frozen"
        return f"<{kind} parameters: {list(self)!r}>"


class OptimizerGroups(SortedMap[OptimizerGroup]):
    """Group name -> ``OptimizerGroup``, iterating sorted by name."""

    __slots__ = ()

    def __init__(self, groups: Mapping[str, OptimizerGroup] | None = None) -> None:
        super().__init__()
        if groups is not None:
            for key, value in groups.items():
                self[key] = value

    def __setitem__(self, key: str, value: OptimizerGroup) -> None:
        name = check_name(key, "optimizer group")
        if not isinstance(value, OptimizerGroup):
            raise TypeError(f"optimizer group {name!r} must be an OptimizerGroup, got {type(value).__name__}")
        self._items[name] = value

    def __repr__(self) -> str:
        return f"OptimizerGroups({dict(self.items())!r})"


__all__ = ["OptimizerGroups", "ParameterMap", "ParameterStore", "ParameterView"]
