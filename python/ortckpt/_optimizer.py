"""``OptimizerGroup``: one optimizer parameter group (step, learning rate, momentum tensors)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any

from ._dtypes import type_name
from ._scalars import check_name, to_float32, to_int64
from ._sorted_map import SortedMap
from ._tensor import Tensor, from_array

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, NDArray


class Momentums(MutableMapping[str, "NDArray[Any]"]):  # a string: numpy.typing only for type checkers
    """Momentum name -> read-only numpy array for one parameter (arrays materialize lazily).

    Assigning an array stores a copy. Iterates sorted by name, as ORT writes them.
    """

    __slots__ = ("_param", "_tensors")

    def __init__(self, param_name: str, items: Mapping[str, Any] | None = None) -> None:
        self._param = param_name
        self._tensors: dict[str, Tensor] = {}
        if items is not None:
            for key, value in items.items():
                self[key] = value

    @classmethod
    def _from_tensors(cls, param_name: str, tensors: dict[str, Tensor]) -> Momentums:
        self = cls(param_name)
        self._tensors = tensors
        return self

    def __getitem__(self, key: str) -> NDArray[Any]:
        return self._tensors[key].array(f"{self._param}/{key}")

    def __setitem__(self, key: str, value: ArrayLike) -> None:
        name = check_name(key, "momentum")
        self._tensors[name] = from_array(value, f"{self._param}/{name}")

    def __delitem__(self, key: str) -> None:
        del self._tensors[key]

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._tensors))

    def __len__(self) -> int:
        return len(self._tensors)

    def __contains__(self, key: object) -> bool:
        return key in self._tensors

    def __repr__(self) -> str:
        inner = ", ".join(
            f"{name!r}: {type_name(t.data_type)}{list(t.shape)}" for name, t in momentum_tensors(self)
        )
        return f"Momentums({{{inner}}})"


# The package's own readers (the writer's spec, the CLI's inspect and diff) see a momentum's storage
# through these two: its dtype, shape and size without reading its values. Not public API.
def momentum_tensor(momentums: Momentums, name: str) -> Tensor:
    """The storage of momentum ``name`` (KeyError when there is none)."""
    return momentums._tensors[name]


def momentum_tensors(momentums: Momentums) -> list[tuple[str, Tensor]]:
    """(momentum name, storage) pairs, sorted by name as ORT writes them."""
    return sorted(momentums._tensors.items())


class MomentumStates(SortedMap[Momentums]):
    """Parameter name -> ``Momentums``. Assign any mapping of momentum name -> array."""

    __slots__ = ()

    def __init__(self, items: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        super().__init__()
        if items is not None:
            for key, value in items.items():
                self[key] = value

    def __setitem__(self, key: str, value: Mapping[str, Any]) -> None:
        name = check_name(key, "optimizer state parameter")
        if isinstance(value, Momentums):  # share the (immutable) tensors, no copy
            self._items[name] = Momentums._from_tensors(name, dict(value._tensors))
            return
        if not isinstance(value, Mapping):
            raise TypeError(
                f"optimizer state for {name!r} must be a mapping of momentum name -> array, "
                f"got {type(value).__name__}"
            )
        self._items[name] = Momentums(name, value)

    def __repr__(self) -> str:
        return f"MomentumStates({dict(self._items)!r})"


class OptimizerGroup:
    """An optimizer group: ``step`` (int64), ``initial_learning_rate`` (stored as float32) and
    ``states`` (parameter name -> momentum name -> array, e.g. AdamW's ``momentum0``/``momentum1``).
    """

    __slots__ = ("_lr", "_states", "_step")

    def __init__(
        self,
        step: int = 0,
        initial_learning_rate: float = 0.0,
        states: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self._step = to_int64(step, "optimizer group step")
        self._lr = to_float32(initial_learning_rate, "optimizer group initial_learning_rate")
        self._states = MomentumStates(states)

    @classmethod
    def _from_parts(cls, step: int, lr: float, states: MomentumStates) -> OptimizerGroup:
        self = cls.__new__(cls)
        self._step = step
        self._lr = lr
        self._states = states
        return self

    @property
    def step(self) -> int:
        return self._step

    @step.setter
    def step(self, value: int) -> None:
        self._step = to_int64(value, "optimizer group step")

    @property
    def initial_learning_rate(self) -> float:
        return self._lr

    @initial_learning_rate.setter
    def initial_learning_rate(self, value: float) -> None:
        self._lr = to_float32(value, "optimizer group initial_learning_rate")

    @property
    def states(self) -> MomentumStates:
        return self._states

    @states.setter
    def states(self, value: Mapping[str, Mapping[str, Any]]) -> None:
        self._states = MomentumStates(value)

    def __repr__(self) -> str:
        counts = sorted({len(m) for m in self._states.values()})
        per = "/".join(str(c) for c in counts) or "0"
        return (
            f"OptimizerGroup(step={self._step}, initial_learning_rate={self._lr!r}, "
            f"states={len(self._states)} parameters x {per} momentums)"
        )
