"""Lazy tensor storage behind ``Parameter`` and optimizer momentums.

A tensor is one of:

* ``BufferTensor``: a byte range of a backing buffer (a ``MappedFile``, ``bytes`` or read-only
  ``memoryview``) as found by ``_native.index_checkpoint``. Nothing is read until ``array()``; aligned
  data comes back as a zero-copy read-only view whose numpy ``base`` chain keeps the buffer alive.
* ``StringTensor``: the string values of a loaded STRING tensor.
* ``ArrayTensor``: a numpy array owned by the state (C-contiguous, little-endian, read-only).
* ``NominalTensor``: name and data type only (nominal checkpoints); it has no values.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Union, cast

import numpy as np

from . import _dtypes, _native
from ._scalars import check_string
from .errors import CheckpointError, ConversionError, TensorDataError

if TYPE_CHECKING:
    from numpy.typing import NDArray
    from typing_extensions import Buffer, Self

    from ._native import Index, MappedFile

SpecData = Union["Buffer", list[str], None]


def element_count(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


_MAX_BYTES = 2**63 - 1
_MAX_DIMS = 64 if np.lib.NumpyVersion(np.__version__) >= "2.0.0" else 32


def check_numpy_shape(shape: tuple[int, ...], itemsize: int, name: str) -> None:
    """Shapes ONNX allows but numpy cannot hold: more than 64 (numpy 1: 32) dims, or non-zero dims
    whose product overflows numpy's size type even when a 0 dim makes the tensor empty (e.g.
    [0, 2**61, 8]). Say so clearly instead of numpy's generic ValueError."""
    if len(shape) > _MAX_DIMS:
        raise TensorDataError(
            f"tensor {name!r}: {len(shape)} dims are more than numpy arrays support ({_MAX_DIMS})"
        )
    size = max(itemsize, 1)
    for dim in shape:
        if dim:
            size *= dim
    if size > _MAX_BYTES:
        raise TensorDataError(f"tensor {name!r}: shape {list(shape)} is too large for a numpy array")


def empty_array(shape: tuple[int, ...], dtype: np.dtype[Any], key: str, path: str) -> NDArray[Any]:
    """The empty array of a file's zero-size tensor, or ``ConversionError`` (naming the file and
    the tensor) for a shape numpy cannot hold (see ``check_numpy_shape``)."""
    try:
        check_numpy_shape(shape, dtype.itemsize, key)
    except TensorDataError as exc:
        raise ConversionError(f"{path}: {exc}") from None
    return np.zeros(shape, dtype)


def _readonly(arr: NDArray[Any]) -> NDArray[Any]:
    arr.flags.writeable = False
    return arr


class Tensor:
    """Base class: a data type code and a shape; subclasses provide the values."""

    __slots__ = ("data_type", "shape")

    def __init__(self, data_type: int, shape: tuple[int, ...]) -> None:
        self.data_type = data_type
        self.shape = shape

    @property
    def is_nominal(self) -> bool:
        return False

    @property
    def dtype(self) -> np.dtype[Any]:
        return _dtypes.to_numpy(self.data_type)

    @property
    def nbytes(self) -> int:
        """Bytes of tensor data (UTF-8 bytes for STRING tensors)."""
        return element_count(self.shape) * _dtypes.element_size(self.data_type)

    def array(self, name: str) -> NDArray[Any]:
        raise NotImplementedError

    def spec_data(self, name: str) -> SpecData:
        """The ``data`` field of a ``_native`` TensorSpec."""
        raise NotImplementedError


class BufferTensor(Tensor):
    """Values in a byte range of a buffer that cannot change (``bytes``, a read-only buffer)."""

    __slots__ = ("_buffer", "_cache", "_nbytes", "_offset")

    def __init__(
        self, buffer: Buffer, offset: int, nbytes: int, data_type: int, shape: tuple[int, ...]
    ) -> None:
        """A tensor whose ``nbytes`` bytes at ``offset`` of ``buffer`` are its values. The caller
        guarantees the range and the length (the core did, for every record of an index); other
        sources go through ``BufferTensor.checked``."""
        super().__init__(data_type, shape)
        self._buffer = buffer
        self._offset = offset
        self._nbytes = nbytes
        self._cache: NDArray[Any] | None = None

    @classmethod
    def checked(
        cls, buffer: Buffer, offset: int, nbytes: int, data_type: int, shape: tuple[int, ...], name: str
    ) -> Self:
        """A tensor over bytes no core check has seen (an ONNX TensorProto's)."""
        if not _dtypes.is_known(data_type) or data_type == _dtypes.STRING:
            raise TensorDataError(f"tensor {name!r}: unsupported data type {data_type} for raw data")
        check_numpy_shape(shape, _dtypes.element_size(data_type), name)
        expected = element_count(shape) * _dtypes.element_size(data_type)
        if nbytes != expected:
            raise TensorDataError(
                f"tensor {name!r}: {_dtypes.type_name(data_type)} shape {shape} needs {expected} bytes, "
                f"raw data has {nbytes}"
            )
        return cls(buffer, offset, nbytes, data_type, shape)

    @property
    def nbytes(self) -> int:
        return self._nbytes

    def array(self, name: str) -> NDArray[Any]:
        if self._cache is None:
            self._before_use()
            self._cache = buffer_array(self._buffer, self._offset, self._nbytes, self.dtype, self.shape, name)
        return self._cache

    def spec_data(self, name: str) -> SpecData:
        self._before_use()
        return self.prepared_bytes()

    def prepared_bytes(self) -> memoryview:
        """The values' bytes, for a caller that ran the checks of ``_before_use`` already (for
        many tensors at once: ``Index.prepare_momentums``)."""
        return memoryview(self._buffer)[self._offset : self._offset + self._nbytes]

    def _before_use(self) -> None:
        """Runs before the bytes are first read, and before each save reads them."""


class MappedTensor(BufferTensor):
    """Values in a byte range of a ``MappedFile`` (an ONNX model's external data file)."""

    __slots__ = ()

    _buffer: MappedFile

    def _before_use(self) -> None:
        # Another program may have rewritten the file since it was mapped: CheckpointChangedError
        # instead of wrong values or SIGBUS; then readahead for a long range.
        self._buffer.prepare(self._offset, self._nbytes)


class IndexedTensor(BufferTensor):
    """Values of tensor ``position`` of a loaded checkpoint's native ``Index``."""

    __slots__ = ("_index", "_position")

    def __init__(
        self,
        index: Index,
        position: int,
        buffer: Buffer,
        offset: int,
        nbytes: int,
        data_type: int,
        shape: tuple[int, ...],
    ) -> None:
        super().__init__(buffer, offset, nbytes, data_type, shape)
        self._index = index
        self._position = position

    def array(self, name: str) -> NDArray[Any]:
        if self._cache is None:
            # `_before_use` and the view in one native call
            view = self._index.array(self._position, self.dtype)
            if view is None:  # empty or misaligned: numpy's own path
                view = buffer_array(self._buffer, self._offset, self._nbytes, self.dtype, self.shape, name)
            self._cache = view
        return self._cache

    @property
    def index(self) -> Index:
        """The index whose tensor this is."""
        return self._index

    def _before_use(self) -> None:
        # The core's checks left for first use: file unchanged since load, stored length.
        self._index.prepare(self._position)


def buffer_array(
    buffer: Buffer, offset: int, nbytes: int, dtype: np.dtype[Any], shape: tuple[int, ...], name: str
) -> NDArray[Any]:
    """The ``nbytes`` bytes at ``offset`` of ``buffer`` as a read-only array of ``dtype`` and
    ``shape``: a zero-copy view (its ``base`` chain keeps the buffer alive), or an aligned copy when
    the bytes are not aligned for ``dtype``. ``nbytes`` must be the shape's size in bytes."""
    if nbytes == 0 or len(shape) > _MAX_DIMS:
        # Only an empty tensor's dims can overflow numpy's size type: a non-empty one's product is
        # bounded by the bytes it has.
        check_numpy_shape(shape, dtype.itemsize, name)
        return _readonly(np.empty(shape, dtype=dtype))
    # any buffer works; numpy's stubs only list a few types
    flat = np.frombuffer(cast("bytes", buffer), dtype, nbytes // dtype.itemsize, offset)
    if not flat.flags.aligned:
        flat = _readonly(flat.copy())  # fresh numpy allocations are aligned for every dtype
    return flat if len(shape) == 1 else flat.reshape(shape)


class StringTensor(Tensor):
    __slots__ = ("_values",)

    def __init__(self, values: list[str], shape: tuple[int, ...]) -> None:
        """The caller guarantees ``len(values)`` is the element count of ``shape``."""
        super().__init__(_dtypes.STRING, shape)
        self._values = values

    @classmethod
    def checked(cls, values: list[str], shape: tuple[int, ...], name: str) -> StringTensor:
        """A ``StringTensor`` from values no core check has seen (an ONNX TensorProto's)."""
        if len(values) != element_count(shape):
            raise TensorDataError(
                f"string tensor {name!r}: shape {shape} needs {element_count(shape)} strings, "
                f"found {len(values)}"
            )
        return cls(values, shape)

    @property
    def nbytes(self) -> int:
        return sum(len(s.encode("utf-8")) for s in self._values)

    def array(self, name: str) -> NDArray[Any]:
        check_numpy_shape(self.shape, 8, name)
        return _string_array(self._values, self.shape)

    def spec_data(self, name: str) -> SpecData:
        return list(self._values)


class ArrayTensor(Tensor):
    __slots__ = ("_array",)

    def __init__(self, array: NDArray[Any], data_type: int) -> None:
        super().__init__(data_type, tuple(int(d) for d in array.shape))
        self._array = array

    @property
    def nbytes(self) -> int:
        if self.data_type == _dtypes.STRING:
            return sum(len(s.encode("utf-8")) for s in self._array.flat)
        return int(self._array.nbytes)

    def array(self, name: str) -> NDArray[Any]:
        return self._array

    def spec_data(self, name: str) -> SpecData:
        if self.data_type == _dtypes.STRING:
            return [str(s) for s in self._array.flat]
        # a flat uint8 view: the buffer protocol cannot export ml_dtypes types, and 0-d arrays
        # cannot change itemsize in place
        return self._array.reshape(-1).view(np.uint8).data


class NominalTensor(Tensor):
    __slots__ = ()

    def __init__(self, data_type: int, shape: tuple[int, ...] = ()) -> None:
        super().__init__(data_type, shape)

    @property
    def is_nominal(self) -> bool:
        return True

    @property
    def nbytes(self) -> int:
        return 0

    def array(self, name: str) -> NDArray[Any]:
        raise CheckpointError(
            f"tensor {name!r} has no values: the checkpoint is nominal "
            "(it records names and data types only; the values come from the ONNX model)"
        )

    def spec_data(self, name: str) -> SpecData:
        return None  # the native writer's marker for "no values"


def _string_array(values: list[str], shape: tuple[int, ...]) -> NDArray[Any]:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return _readonly(out.reshape(shape))


def from_array(value: object, name: str, *, like: Tensor | None = None) -> ArrayTensor:
    """Copy array-like ``value`` into an ``ArrayTensor`` owned by the state.

    With ``like``, the result must have the same data type and shape (a non-ndarray ``value`` such as
    a list or a Python scalar is first converted to ``like``'s dtype).
    """
    if not isinstance(value, np.ndarray):
        if like is not None:
            try:
                value = np.asarray(value, dtype=like.dtype)
            except (TypeError, ValueError) as exc:
                raise TensorDataError(
                    f"cannot set values of {name!r}: cannot convert {type(value).__name__} "
                    f"to {_dtypes.type_name(like.data_type)}: {exc}"
                ) from exc
        else:
            value = np.asarray(value)
    assert isinstance(value, np.ndarray)
    data_type = _dtypes.from_numpy(value.dtype, name)
    shape = tuple(int(d) for d in value.shape)
    if like is not None:
        if data_type != like.data_type:
            raise TensorDataError(
                f"cannot set values of {name!r}: expected dtype {_dtypes.type_name(like.data_type)}, "
                f"got {_dtypes.type_name(data_type)} ({value.dtype})"
            )
        if shape != like.shape:
            raise TensorDataError(f"cannot set values of {name!r}: expected shape {like.shape}, got {shape}")
    if data_type == _dtypes.STRING:
        strings: list[str] = []
        for item in value.flat:
            if not isinstance(item, str):
                raise TypeError(
                    f"tensor {name!r}: object arrays must hold only str, found {type(item).__name__}"
                )
            strings.append(check_string(item, f"tensor {name!r}"))
        return ArrayTensor(_string_array(strings, shape), data_type)
    target = _dtypes.to_numpy(data_type)
    if value.flags.c_contiguous and value.dtype == target and _native.is_unchanging(value):
        # Memory that cannot change under the state (a loaded tensor, np.memmap(mode="r"), a
        # read-only array owning its data; the rule `load_bytes` applies too) is kept without a
        # copy: this is how states larger than RAM are built.
        return ArrayTensor(value, data_type)
    copy = np.array(value, dtype=target, order="C", copy=True)
    return ArrayTensor(_readonly(copy), data_type)
