"""Checkpoints <-> Flower records: ``ArrayRecord`` (named tensors), legacy ``Parameters`` /
ndarrays (ORT's parameter order), properties <-> ``MetricRecord`` / ``ConfigRecord``, and raw
checkpoint bytes carried in an ``ArrayRecord``.

Flower's ``Array`` stores a tensor as ``numpy.save`` bytes without pickle (``stype
"numpy.ndarray"``). Every numeric ORT dtype fits: numpy's own dtypes natively, and the ml_dtypes
ones (bfloat16, float8) as their raw bytes (numpy writes them as ``|V2`` / ``|V1``) with the
dtype's name in ``Array.dtype``, which is how Flower's own ``Array(ndarray)`` labels them. ORT
string tensors cannot be carried (they would need pickle): ``ConversionError``.

Decoding treats every record as untrusted: the ``.npy`` header is parsed by the core (never unpickled), its
dtype, shape and byte count are checked against the ``Array``'s fields and the reference before
any array is made, and every failure is a ``ConversionError`` naming the tensor.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord
from flwr.common import Parameters

from ... import _dtypes, _native
from ..._sources import open_state
from ..._tensor import check_numpy_shape
from ..._types import CheckpointSource
from ...errors import ConversionError, TensorDataError
from ...state import CheckpointState

#: The key of the one ``Array`` that carries a whole checkpoint's bytes in an ``ArrayRecord``.
CHECKPOINT_KEY = "ortckpt.checkpoint"
#: The key of a flat float32 parameter buffer (ORT's ``get_contiguous_parameters``) in an ``ArrayRecord``.
BUFFER_KEY = "ortckpt.buffer"

_NUMPY_STYPE = "numpy.ndarray"


def _carried_dtypes() -> dict[str, np.dtype[Any]]:
    """Every dtype name an ``Array`` may carry (ORT's numeric types), to its numpy dtype."""
    return {
        _dtypes.type_name(code): _dtypes.to_numpy(code)
        for code in _dtypes.DATA_TYPES
        if code != _dtypes.STRING
    }


def _dtype_name(dtype: np.dtype[Any], name: str) -> str:
    code = _dtypes.from_numpy(dtype, name)
    if code == _dtypes.STRING:
        raise ConversionError(
            f"parameter {name!r} is a string tensor, which a Flower Array cannot carry (Flower "
            "serializes arrays with numpy.save without pickle); send trainable_only=True (string "
            "tensors are never trainable) and decode with the reference, which supplies it"
        )
    return _dtypes.type_name(code)


def _array_of(values: np.ndarray[Any, Any], name: str) -> Array:
    """A Flower ``Array`` of ``values``: exactly what ``Array(ndarray)`` makes, for every dtype."""
    dtype_name = _dtype_name(values.dtype, name)
    buffer = io.BytesIO()
    # numpy writes the ml_dtypes types as void (|V2, |V1): the bytes are the values, unchanged
    np.save(buffer, np.array(values, order="C", copy=not values.flags.c_contiguous), allow_pickle=False)
    return Array(
        dtype=dtype_name,
        shape=tuple(int(d) for d in values.shape),
        stype=_NUMPY_STYPE,
        data=buffer.getvalue(),
    )


def _header(data: bytes, name: str) -> tuple[str, bool, tuple[int, ...], int]:
    """(descr, fortran_order, shape, offset of the values) of a ``.npy`` buffer, parsed by the
    core's ``.npy`` parser (the one ``.npz`` files are read with, and its header limit)."""
    descr, fortran, dims, offset = _native.parse_npy_buffer(data, name)
    shape = tuple(dims)
    try:  # sizes past numpy's limit, even when a 0 dim empties the array
        check_numpy_shape(shape, 1, name)
    except TensorDataError as exc:
        raise ConversionError(str(exc)) from None
    return descr, fortran, shape, offset


def _decode_array(array: object, name: str, expected: np.dtype[Any] | None) -> np.ndarray[Any, Any]:
    """The values of an untrusted Flower ``Array``, checked; ``expected`` the reference's dtype."""
    if not isinstance(array, Array):
        raise ConversionError(f"tensor {name!r}: expected a flwr Array, got {type(array).__name__}")
    if array.stype != _NUMPY_STYPE:
        raise ConversionError(f"tensor {name!r}: Array serialization {array.stype!r} is not {_NUMPY_STYPE!r}")
    dtype = _carried_dtypes().get(array.dtype) if isinstance(array.dtype, str) else None
    if dtype is None:
        raise ConversionError(f"tensor {name!r}: Array dtype {array.dtype!r} is not an ORT tensor type")
    if expected is not None and dtype != expected:
        raise ConversionError(f"tensor {name!r}: dtype {dtype} where the reference has {expected}")
    data = bytes(array.data) if not isinstance(array.data, bytes) else array.data
    descr, fortran, shape, offset = _header(data, name)
    # what numpy.save writes for the dtype (little-endian), or void of its size for the ml_dtypes
    # types (numpy writes most of them as |V1 / |V2, float8_e5m2 as <f1, which numpy cannot read)
    accepted: set[object] = {np.lib.format.dtype_to_descr(dtype)}
    if dtype.isbuiltin == 2:
        accepted |= {f"|V{dtype.itemsize}", f"<V{dtype.itemsize}"}
    if descr not in accepted:
        raise ConversionError(
            f"tensor {name!r}: .npy data of type {descr!r} for an Array of dtype {array.dtype}"
        )
    if tuple(array.shape) != shape:
        raise ConversionError(
            f"tensor {name!r}: .npy shape {shape} differs from the Array's shape {tuple(array.shape)}"
        )
    count = math.prod(shape)
    if len(data) - offset != count * dtype.itemsize:
        raise ConversionError(
            f"tensor {name!r}: {len(data) - offset} bytes of values for shape {shape} of {dtype} "
            f"({count * dtype.itemsize} expected)"
        )
    values = np.frombuffer(data, dtype=dtype, count=count, offset=offset).reshape(
        shape[::-1] if fortran else shape
    )
    return np.array(values.T if fortran else values, order="C")


def parameter_order(src: CheckpointSource, *, trainable_only: bool = False) -> list[str]:
    """The parameter names in ORT's order: sorted by their UTF-8 bytes, as ORT's
    ``CheckpointState.parameter_names()`` returns them and its state-path save writes them. This is
    the order of ``to_ndarrays`` / ``to_parameters`` (legacy ``Parameters`` have no names)."""
    state = open_state(src)
    names = [n for n, p in state.parameters.items() if p.trainable or not trainable_only]
    return sorted(names, key=lambda n: n.encode("utf-8", "surrogatepass"))


def _values(state: CheckpointState, names: Iterable[str]) -> list[tuple[str, np.ndarray[Any, Any]]]:
    out = []
    for name in names:
        param = state.parameters[name]
        if param.is_nominal:
            raise ConversionError(f"parameter {name!r} has no values (a nominal checkpoint)")
        out.append((name, param.data))
    return out


def to_arrayrecord(src: CheckpointSource, *, trainable_only: bool = False) -> ArrayRecord:
    """A Flower ``ArrayRecord`` of a checkpoint's parameters, keyed by their ORT names, in ORT's
    order (``parameter_order``). ``trainable_only`` leaves frozen parameters out (the decoder
    takes them from its reference). Bit-exact for every numeric dtype (NaN payloads, -0.0,
    bfloat16 and float8 included); a string tensor raises ``ConversionError``."""
    state = open_state(src)
    names = parameter_order(state, trainable_only=trainable_only)
    return ArrayRecord({name: _array_of(values, name) for name, values in _values(state, names)})


def _rebuild(
    values: Mapping[str, np.ndarray[Any, Any]], reference: CheckpointState, label: str
) -> CheckpointState:
    """A state with ``values`` for the reference's parameters (frozen ones the record lacks come
    from the reference), its trainable flags and its properties."""
    trainable: dict[str, np.ndarray[Any, Any]] = {}
    frozen: dict[str, np.ndarray[Any, Any]] = {}
    for name, param in reference.parameters.items():
        if name in values:
            array = values[name]
            if array.shape != param.shape and not param.is_nominal:
                raise ConversionError(
                    f"{label}: parameter {name!r} has shape {array.shape}, the reference {param.shape}"
                )
        elif not param.trainable:
            array = param.data
        else:
            raise ConversionError(f"{label}: trainable parameter {name!r} of the reference is missing")
        (trainable if param.trainable else frozen)[name] = array
    extra = sorted(set(values) - set(reference.parameters))
    if extra:
        raise ConversionError(f"{label}: parameter {extra[0]!r} is not in the reference")
    return CheckpointState(trainable, frozen=frozen, properties=dict(reference.properties))


def from_arrayrecord(
    record: ArrayRecord,
    reference: CheckpointSource | None = None,
    *,
    trainable: Iterable[str] | None = None,
) -> CheckpointState:
    """A ``CheckpointState`` from an ``ArrayRecord`` keyed by parameter names (untrusted input).

    With ``reference`` (a state, checkpoint bytes or path): every array must be one of its
    parameters with its dtype and shape, every trainable parameter must be there, frozen ones the
    record lacks come from the reference, and the trainable flags and properties are the
    reference's (the optimizer state is not carried). Without it, every array becomes a parameter,
    trainable if named in ``trainable`` (default: the floating-point ones). Any mismatch or
    malformed ``Array`` raises ``ConversionError`` naming the tensor."""
    if not isinstance(record, ArrayRecord):
        raise ConversionError(f"expected a flwr ArrayRecord, got {type(record).__name__}")
    if CHECKPOINT_KEY in record or BUFFER_KEY in record:
        raise ConversionError(
            f"this ArrayRecord carries a whole checkpoint ({CHECKPOINT_KEY!r}) or a parameter buffer "
            f"({BUFFER_KEY!r}); read it with checkpoint_bytes() / buffer_values()"
        )
    ref = open_state(reference) if reference is not None else None
    values: dict[str, np.ndarray[Any, Any]] = {}
    for name, array in record.items():
        expected = None
        if ref is not None:
            param = ref.parameters.get(name)
            if param is None:
                raise ConversionError(f"ArrayRecord: parameter {name!r} is not in the reference")
            expected = param.dtype
        values[name] = _decode_array(array, name, expected)
    if ref is not None:
        return _rebuild(values, ref, "ArrayRecord")
    wanted = (
        set(trainable)
        if trainable is not None
        else {n for n, v in values.items() if v.dtype.kind in "fc" or v.dtype.isbuiltin == 2}
    )
    return CheckpointState(
        {n: v for n, v in values.items() if n in wanted},
        frozen={n: v for n, v in values.items() if n not in wanted},
    )


def to_ndarrays(src: CheckpointSource, *, trainable_only: bool = False) -> list[np.ndarray[Any, Any]]:
    """The parameters' arrays in ORT's order (``parameter_order``), as legacy Flower clients and
    strategies exchange them (read-only views; bfloat16/float8 as ml_dtypes arrays)."""
    state = open_state(src)
    return [values for _, values in _values(state, parameter_order(state, trainable_only=trainable_only))]


def from_ndarrays(
    arrays: Sequence[np.ndarray[Any, Any]], reference: CheckpointSource, *, trainable_only: bool = False
) -> CheckpointState:
    """A state from arrays in ORT's order (``to_ndarrays``' inverse): the names, trainable flags,
    dtypes, shapes and properties are the reference's; a wrong count, dtype or shape raises
    ``ConversionError``. Arrays of the dtype's raw bytes (numpy's ``|V2`` / ``|V1``, as
    ``numpy.load`` returns bfloat16 / float8) are taken as that dtype, bit for bit."""
    ref = open_state(reference)
    names = parameter_order(ref, trainable_only=trainable_only)
    if len(arrays) != len(names):
        raise ConversionError(
            f"{len(arrays)} arrays for the reference's {len(names)} parameters ({names[:3]}...)"
        )
    values = {}
    for name, array in zip(names, arrays):
        expected = ref.parameters[name].dtype
        value = np.asarray(array)
        if value.dtype != expected:
            if (
                value.dtype.kind == "V"
                and value.dtype.itemsize == expected.itemsize
                and expected.isbuiltin == 2
            ):
                value = value.view(expected)
            else:
                raise ConversionError(
                    f"parameter {name!r}: dtype {value.dtype} where the reference has {expected}"
                )
        values[name] = value
    return _rebuild(values, ref, "ndarrays")


def to_parameters(src: CheckpointSource, *, trainable_only: bool = False) -> Parameters:
    """Legacy Flower ``Parameters`` (``numpy.save`` bytes per tensor, ORT's order)."""
    arrays = to_arrayrecord(src, trainable_only=trainable_only)
    return Parameters(tensors=[a.data for a in arrays.values()], tensor_type=_NUMPY_STYPE)


def from_parameters(
    parameters: Parameters, reference: CheckpointSource, *, trainable_only: bool = False
) -> CheckpointState:
    """A state from legacy ``Parameters`` in ORT's order (``to_parameters``' inverse), checked
    against the reference as ``from_ndarrays`` (each tensor's bytes parsed as ``from_arrayrecord``)."""
    if not isinstance(parameters, Parameters) or parameters.tensor_type != _NUMPY_STYPE:
        raise ConversionError(f"expected flwr Parameters of tensor_type {_NUMPY_STYPE!r}")
    ref = open_state(reference)
    names = parameter_order(ref, trainable_only=trainable_only)
    if len(parameters.tensors) != len(names):
        raise ConversionError(
            f"{len(parameters.tensors)} tensors for the reference's {len(names)} parameters"
        )
    values = {}
    for name, data in zip(names, parameters.tensors):
        param = ref.parameters[name]
        array = Array(
            dtype=_dtypes.type_name(param.data_type), shape=tuple(param.shape), stype=_NUMPY_STYPE, data=data
        )
        values[name] = _decode_array(array, name, param.dtype)
    return _rebuild(values, ref, "Parameters")


# -- properties <-> metric / config records ----------------------------------------------------


def to_metricrecord(
    src: CheckpointSource,
    *,
    weight_property: str | None = "samples",
    weighted_by_key: str = "num-examples",
) -> MetricRecord:
    """The numeric properties of a checkpoint (ints and floats; strings go to
    ``to_configrecord``) as a ``MetricRecord``. ``weight_property`` (the device's sample count)
    is also stored under ``weighted_by_key``, the key Flower's FedAvg weighs by (its default
    ``"num-examples"``); a missing weight property raises ``KeyError``."""
    state = open_state(src)
    record = MetricRecord()
    for name, value in state.properties.items():
        if isinstance(value, (int, float)):
            record[name] = value
    if weight_property is not None:
        weight = state.properties.get(weight_property)
        if not isinstance(weight, (int, float)):
            raise KeyError(f"the checkpoint has no numeric property {weight_property!r} to weigh by")
        record[weighted_by_key] = weight
    return record


def to_configrecord(src: CheckpointSource) -> ConfigRecord:
    """Every property of a checkpoint (int, float and str, types kept) as a ``ConfigRecord``."""
    return ConfigRecord(dict(open_state(src).properties.items()))


def properties_from_records(*records: MetricRecord | ConfigRecord) -> dict[str, int | float | str]:
    """Properties from metric / config records (later records win), for ``state.properties``.
    Values other than int, float and str (lists, bytes, bools) raise ``ConversionError``: a
    checkpoint property cannot hold them. Floats are stored by ORT as float32."""
    out: dict[str, int | float | str] = {}
    for record in records:
        for key, value in record.items():
            if isinstance(value, bool) or not isinstance(value, (int, float, str)):
                raise ConversionError(
                    f"record value {key!r} of type {type(value).__name__} cannot be a checkpoint property"
                )
            out[key] = value
    return out


# -- whole checkpoints in an ArrayRecord ---------------------------------------------------------


def checkpoint_record(data: bytes | bytearray | memoryview) -> ArrayRecord:
    """An ``ArrayRecord`` carrying a whole checkpoint's bytes (one uint8 ``Array`` under
    ``CHECKPOINT_KEY``): what a device replies with, or what the server sends to devices."""
    return ArrayRecord({CHECKPOINT_KEY: _array_of(np.frombuffer(bytes(data), np.uint8), CHECKPOINT_KEY)})


def checkpoint_bytes(record: ArrayRecord) -> bytes:
    """The checkpoint bytes of a ``checkpoint_record`` (untrusted: validate them with
    ``ortckpt.load_bytes``). ``ConversionError`` when the record is not one."""
    keys = set(record) if isinstance(record, ArrayRecord) else set()
    if CHECKPOINT_KEY not in keys or not keys <= {CHECKPOINT_KEY, BUFFER_KEY}:
        raise ConversionError(
            f"the ArrayRecord does not carry a checkpoint (an Array under {CHECKPOINT_KEY!r})"
        )
    array = record[CHECKPOINT_KEY]
    if not isinstance(array, Array) or array.dtype != "uint8" or len(array.shape) != 1:
        raise ConversionError(f"{CHECKPOINT_KEY!r} must be a 1-D uint8 Array")
    return _decode_array(array, CHECKPOINT_KEY, np.dtype(np.uint8)).tobytes()


# -- flat parameter buffers in an ArrayRecord --------------------------------------------------


def buffer_record(buffer: np.ndarray[Any, Any], nominal: bytes | None = None) -> ArrayRecord:
    """An ``ArrayRecord`` carrying a flat float32 parameter buffer (``ortckpt.parameters_to_buffer``
    on the server, ``Module.get_contiguous_parameters`` on a device) under ``BUFFER_KEY``, and,
    when given, a nominal checkpoint's bytes under ``CHECKPOINT_KEY`` (what a device loads the
    buffer into with ``copy_buffer_to_parameters``)."""
    values = np.asarray(buffer)
    if values.dtype != np.float32 or values.ndim != 1:
        raise ConversionError(
            f"a parameter buffer is a 1-D float32 array, not {values.ndim}-D {values.dtype}"
        )
    arrays = {BUFFER_KEY: _array_of(values, BUFFER_KEY)}
    if nominal is not None:
        arrays[CHECKPOINT_KEY] = _array_of(np.frombuffer(bytes(nominal), np.uint8), CHECKPOINT_KEY)
    return ArrayRecord(arrays)


def buffer_values(record: ArrayRecord) -> np.ndarray[Any, Any]:
    """The flat float32 buffer of a ``buffer_record`` (untrusted: decode it against the model with
    ``ortckpt.parameters_from_buffer``). ``ConversionError`` when the record has none."""
    if not isinstance(record, ArrayRecord) or BUFFER_KEY not in record:
        raise ConversionError(f"the ArrayRecord does not carry a parameter buffer ({BUFFER_KEY!r})")
    array = record[BUFFER_KEY]
    if not isinstance(array, Array) or len(array.shape) != 1:
        raise ConversionError(f"{BUFFER_KEY!r} must be a 1-D float32 Array")
    return _decode_array(array, BUFFER_KEY, np.dtype(np.float32))
