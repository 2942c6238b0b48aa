"""``Parameter``: one named model tensor (trainable or frozen)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from . import _dtypes
from ._scalars import check_name
from ._tensor import Tensor, from_array
from .errors import CheckpointError

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, NDArray


def _check_bool(value: object, what: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{what} must be a bool, got {type(value).__name__}: {value!r}")
    return bool(value)


def tensor_of(param: Parameter) -> Tensor:
    """The storage behind ``param``: its data type, shape and size without reading its values, and
    its values in the form the writer takes. For the package's own readers (the writer's spec, the
    CLI's diff, ONNX export); not public API."""
    return param._tensor


class Parameter:
    """A named tensor of a checkpoint.

    ``data`` is a read-only numpy array (loaded values are zero-copy views of the file when aligned).
    Assigning ``data`` replaces the values; the new array must have the same shape and dtype. The
    state keeps its own copy of memory that can change, so later changes to the caller's array do not
    leak in; C-contiguous little-endian arrays whose memory cannot change (a loaded tensor,
    ``np.memmap(..., mode="r")``, a read-only array owning its data; not a read-only view of a
    writable array or ``bytearray``) are kept as they are, without a copy (the rule ``load_bytes``
    applies too).
    """

    __slots__ = ("_doc", "_name", "_tensor", "_trainable")

    def __init__(self, name: str, data: ArrayLike, *, trainable: bool = True) -> None:
        self._name = check_name(name, "parameter")
        self._trainable = _check_bool(trainable, f"parameter {name!r}: trainable")
        self._tensor: Tensor = from_array(data, self._name)
        self._doc = ""

    @classmethod
    def _from_tensor(cls, name: str, tensor: Tensor, trainable: bool, doc_string: str = "") -> Parameter:
        self = cls.__new__(cls)
        self._name = name
        self._tensor = tensor
        self._trainable = trainable
        self._doc = doc_string
        return self

    @property
    def name(self) -> str:
        return self._name

    @property
    def trainable(self) -> bool:
        """True for trainable (``requires_grad``) parameters, False for frozen ones."""
        return self._trainable

    @trainable.setter
    def trainable(self, value: bool) -> None:
        self._trainable = _check_bool(value, f"parameter {self._name!r}: trainable")

    @property
    def doc_string(self) -> str:
        """The tensor's documentation string ("" when none). ORT's TensorProto path stores an
        initializer's ``doc_string`` in the checkpoint and ``load_into_model`` copies it back."""
        return self._doc

    @doc_string.setter
    def doc_string(self, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError(f"parameter {self._name!r}: doc_string must be a str, got {type(value).__name__}")
        self._doc = value

    @property
    def requires_grad(self) -> bool:
        """ORT's name for ``trainable``."""
        return self._trainable

    @property
    def data_type(self) -> int:
        """The ORT ``TensorDataType`` code (1 = float32, ...)."""
        return self._tensor.data_type

    @property
    def dtype(self) -> np.dtype[Any]:
        """The numpy dtype (object for string tensors)."""
        return self._tensor.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        """The dims; ``()`` for nominal parameters, whose shape is not recorded."""
        return self._tensor.shape

    @property
    def ndim(self) -> int:
        return len(self._tensor.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        n = 1
        for d in self._tensor.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        """Bytes of data (UTF-8 bytes for string tensors, 0 for nominal parameters)."""
        return self._tensor.nbytes

    @property
    def is_nominal(self) -> bool:
        """True when the parameter has a name and data type but no values (nominal checkpoint)."""
        return self._tensor.is_nominal

    @property
    def data(self) -> NDArray[Any]:
        """The values as a read-only numpy array (materialized on first access)."""
        return self._tensor.array(self._name)

    @data.setter
    def data(self, value: ArrayLike) -> None:
        if self._tensor.is_nominal:
            raise CheckpointError(
                f"cannot set values of {self._name!r}: the checkpoint is nominal "
                "(its parameters have no shape or values)"
            )
        self._tensor = from_array(value, self._name, like=self._tensor)

    def copy_from(self, value: ArrayLike) -> None:
        """ORT-style alias of assigning ``data``."""
        self.data = value

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> NDArray[Any]:
        data = self.data
        if dtype is not None and np.dtype(dtype) != data.dtype:
            return data.astype(dtype)
        return data.copy() if copy else data

    def __repr__(self) -> str:
        kind = "trainable" if self._trainable else "frozen"
        dtype = _dtypes.type_name(self.data_type)
        if self.is_nominal:
            return f"Parameter({self._name!r}, {dtype}, nominal, {kind})"
        return f"Parameter({self._name!r}, {dtype}, shape={self.shape}, {kind})"
