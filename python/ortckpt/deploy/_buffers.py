"""Device parameter buffers: a checkpoint's parameters as the one flat float32 array ORT's
``Module.get_contiguous_parameters()`` returns, and such an array back into a checkpoint (what
``Module.copy_buffer_to_parameters()`` does on a device), without onnxruntime-training.

ORT's rule (``orttraining/training_api/module.cc``: the ``Module`` constructor,
``GetParametersSize``, ``CopyParametersToBuffer``, ``CopyBufferToParameters``), which this module
follows:

* The parameters in a buffer are the training model's graph inputs (initializers excluded), in
  graph-input order, whose name is a parameter of the checkpoint. Checkpoint parameters that are not
  inputs of the training model are not in the buffer (and are left alone by a copy back).
* ``trainable_only`` leaves out the parameters whose checkpoint flag is frozen (``requires_grad``
  false), without moving the others.
* Each parameter's values follow in C order; its element count comes from the model's input shape.
  The buffer is float32, and every parameter in it must be float32 ("Only float is supported").
* A nominal checkpoint has no values to copy out; a buffer copied into one must hold every
  parameter (``trainable_only=False``), and then the shapes come from the training model.

The graph's inputs also tell whether model and checkpoint belong together: ORT requires a gradient
input (``<name>_grad.accumulation.buffer``) for every trainable parameter; a mismatch is an error
here, before any value is used.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _dtypes, _native
from .._tensor import check_numpy_shape
from ..errors import CheckpointError, ConversionError, ModelError, SourceTooLargeError, TensorDataError
from ..formats._onnx_import import require_onnx
from ..io import load
from ..state import CheckpointState, Parameter

if TYPE_CHECKING:
    import onnx
    from numpy.typing import ArrayLike, NDArray

    from .._paths import StrPath

__all__ = ["parameters_from_buffer", "parameters_to_buffer"]

#: The one data type of ORT's parameter buffers, little-endian as every platform ORT runs on.
BUFFER_DTYPE = np.dtype("<f4")

#: Suffixes of the gradient inputs of a training graph, in the order ORT tries them
#: (training_api/utils.cc ``GetParamNameFromGradient``).
GRAD_SUFFIXES = ("_grad.accumulation.buffer", "_grad", "_grad.accumulation.out")

#: The training graph's input that tells it to reset the gradients (not a parameter).
RESET_GRAD_INPUT = "lazy_reset_grad"


@dataclass(frozen=True)
class _Input:
    """One graph input: name, ONNX element type (0 when not a tensor), dims (None when the shape
    or one of its dims is not a fixed number)."""

    name: str
    elem_type: int
    dims: tuple[int, ...] | None


@dataclass(frozen=True)
class Slot:
    """Where one parameter's values lie in a buffer (in float32 elements)."""

    name: str
    shape: tuple[int, ...]
    offset: int
    count: int


@dataclass(frozen=True)
class Layout:
    """A buffer's parameters, in order, for one training model, checkpoint and ``trainable_only``."""

    slots: tuple[Slot, ...]
    size: int
    model: str


def _grad_param(input_name: str) -> str | None:
    """The parameter a gradient input belongs to, or None when ``input_name`` is not one."""
    for suffix in GRAD_SUFFIXES:
        if input_name.endswith(suffix):
            return input_name[: -len(suffix)]
    return None


def _model_inputs(training_model: onnx.ModelProto | StrPath) -> tuple[str, list[_Input]]:
    """(how to name the model in messages, its main graph's inputs that are not initializers)."""
    require_onnx("parameter buffers")
    import onnx

    from ..formats.onnx_io import _load_model

    shown = "the training model"
    if isinstance(training_model, onnx.ModelProto):
        model = training_model  # only read: no private copy needed
    else:
        if isinstance(training_model, (str, os.PathLike)):
            shown = os.fsdecode(os.fspath(training_model))
        try:
            model, _ = _load_model(training_model, "training_model")
        except ModelError as exc:  # documented as ConversionError here (docs/buffers.md)
            raise ConversionError(str(exc)) from None
    graph = model.graph
    initialized = {t.name for t in graph.initializer} | {t.values.name for t in graph.sparse_initializer}
    inputs = []
    for value in graph.input:
        if value.name in initialized:
            continue  # ORT's GetModelInputs leaves out inputs that have an initializer
        elem_type, dims = 0, None
        if value.type.HasField("tensor_type"):
            tensor = value.type.tensor_type
            elem_type = tensor.elem_type
            if tensor.HasField("shape") and all(d.HasField("dim_value") for d in tensor.shape.dim):
                dims = tuple(int(d.dim_value) for d in tensor.shape.dim)
        inputs.append(_Input(value.name, elem_type, dims))
    return shown, inputs


def _open_state(state: CheckpointState | StrPath, what: str) -> CheckpointState:
    if isinstance(state, CheckpointState):
        return state
    if isinstance(state, (str, os.PathLike)):
        return load(state)
    raise TypeError(f"{what} must be a CheckpointState or a checkpoint path, got {type(state).__name__}")


def _count(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _weights(state: CheckpointState, model: str, inputs: list[_Input]) -> list[_Input]:
    """The model inputs that are checkpoint parameters, in graph order, after checking that the
    model's gradient inputs agree with the checkpoint's trainable flags."""
    params = state.parameters
    weights: list[_Input] = []
    grads: dict[str, str] = {}
    for inp in inputs:
        if inp.name in params:
            weights.append(inp)
        elif inp.name != RESET_GRAD_INPUT:
            owner = _grad_param(inp.name)
            if owner is not None:
                grads.setdefault(owner, inp.name)
    if not weights:
        raise ConversionError(
            f"{model}: none of its {len(inputs)} graph inputs is a parameter of the checkpoint "
            f"({len(params)} parameters): it is not the training model of this checkpoint; pass the "
            "training_model.onnx that generate_artifacts wrote with it"
        )
    for owner, grad in grads.items():
        if owner not in params:
            raise ConversionError(
                f"{model}: input {grad!r} is the gradient of parameter {owner!r}, which the checkpoint "
                "does not have: the model and the checkpoint come from different models; pass the "
                "checkpoint generate_artifacts wrote with this training model"
            )
    for inp in weights:
        param = params[inp.name]
        if param.trainable and inp.name not in grads:
            raise ConversionError(
                f"{model}: parameter {inp.name!r} is trainable in the checkpoint but the model has no "
                f"gradient input for it ({inp.name}_grad.accumulation.buffer), so ORT refuses the pair: "
                "pass the training model (not the eval or inference model) generated with this "
                "checkpoint, or a checkpoint where it is frozen"
            )
        if not param.trainable and inp.name in grads:
            raise ConversionError(
                f"{model}: parameter {inp.name!r} is frozen in the checkpoint but trainable in the model "
                f"(it has gradient input {grads[inp.name]!r}): the model and the checkpoint come from "
                "different generate_artifacts runs"
            )
    return weights


def layout(
    state: CheckpointState, training_model: onnx.ModelProto | StrPath, *, trainable_only: bool
) -> Layout:
    """The parameters of ``state``'s buffer for ``training_model``, in ORT's order, checked: each
    one float32 with a fixed shape that matches the checkpoint's (unless the checkpoint is
    nominal)."""
    model, inputs = _model_inputs(training_model)
    return _layout(state, model, inputs, trainable_only)


def _layout(state: CheckpointState, model: str, inputs: list[_Input], trainable_only: bool) -> Layout:
    params = state.parameters
    slots: list[Slot] = []
    offset = 0
    for inp in _weights(state, model, inputs):
        param = params[inp.name]
        if trainable_only and not param.trainable:
            continue
        if inp.elem_type != _dtypes.FLOAT or param.data_type != _dtypes.FLOAT:
            raise ConversionError(
                f"{model}: parameter {inp.name!r} is {_type(inp.elem_type)} in the model and "
                f"{_type(param.data_type)} in the checkpoint: ORT's parameter buffers hold float32 "
                "parameters only"
                + ("" if param.trainable else " (it is frozen: trainable_only=True leaves it out)")
            )
        if inp.dims is None or any(d < 0 for d in inp.dims):
            raise ConversionError(
                f"{model}: input {inp.name!r} has no fixed shape, and ORT sizes a parameter buffer "
                "from the training model's input shapes; regenerate the training artifacts"
            )
        if not state.is_nominal and param.shape != inp.dims:
            raise ConversionError(
                f"{model}: parameter {inp.name!r} has shape {list(param.shape)} in the checkpoint but "
                f"{list(inp.dims)} in the model: they do not belong together; pass the training model "
                "generated with this checkpoint"
            )
        try:  # a shape numpy cannot hold (more than 64 dims, a size past its limit) is the model's fault
            check_numpy_shape(inp.dims, BUFFER_DTYPE.itemsize, inp.name)
        except TensorDataError as exc:
            raise ConversionError(f"{model}: {exc}") from None
        count = _count(inp.dims)
        slots.append(Slot(inp.name, inp.dims, offset, count))
        offset += count
    return Layout(tuple(slots), offset, model)


def _type(code: int) -> str:
    return _dtypes.type_name(code) if code else "not a tensor"


def parameters_to_buffer(
    state: CheckpointState | StrPath,
    training_model: onnx.ModelProto | StrPath,
    *,
    trainable_only: bool = True,
) -> NDArray[np.float32]:
    """The parameters of ``state`` as one flat float32 array, exactly as ORT's
    ``Module.get_contiguous_parameters(trainable_only)`` returns them for the same checkpoint and
    training model: the training graph's parameter inputs in graph order, each one's values in C
    order; frozen parameters left out with ``trainable_only`` (the default here, as in ORT's
    ``get_parameters_size`` and ``copy_buffer_to_parameters``; ORT's ``get_contiguous_parameters``
    defaults to ``False``, so pass it explicitly to match either).

    ``state`` is a ``CheckpointState`` or a checkpoint path; ``training_model`` the training ONNX
    model (``training_model.onnx`` of ``generate_artifacts``): a path, read without its external
    data, or an ``onnx.ModelProto`` (needs the ``onnx`` package). Parameters that are not inputs of
    the model are not in the buffer, as in ORT.

    Raises ``CheckpointError`` for a nominal checkpoint (it has no values), ``ConversionError`` when
    the model and the checkpoint do not belong together or a parameter in the buffer is not
    float32, naming the parameter. Returns a new writable array.
    """
    src = _open_state(state, "state")
    if src.is_nominal:
        raise CheckpointError(
            "the checkpoint is nominal (names and types, no values): there are no values to put in a "
            "buffer (ORT refuses it too); load the full checkpoint"
        )
    plan = layout(src, training_model, trainable_only=bool(trainable_only))
    out = np.empty(plan.size, dtype=BUFFER_DTYPE)
    params = src.parameters
    for slot in plan.slots:
        out[slot.offset : slot.offset + slot.count] = params[slot.name].data.reshape(-1)
    return out


def parameters_from_buffer(
    buffer: ArrayLike | bytes | StrPath,
    reference_state: CheckpointState | StrPath,
    training_model: onnx.ModelProto | StrPath,
    *,
    trainable_only: bool = True,
) -> CheckpointState:
    """A new checkpoint state: ``reference_state`` with the parameters in ``buffer`` replaced by its
    values, as ORT's ``Module.copy_buffer_to_parameters(buffer, trainable_only)`` would leave the
    state (same order and rule as ``parameters_to_buffer``). Everything else of the reference
    (parameters not in the buffer, trainable flags, doc strings, optimizer state, properties) is
    kept; the reference itself is never changed. Values are copied bit for bit (NaN included: check
    them before use if the buffer comes from a device you do not trust).

    ``buffer`` is a float32 numpy array (any shape; its C-order elements are used), a bytes-like
    object of little-endian float32 values (what a device uploads), or the path of a file holding
    them (raw little-endian float32, as ``numpy.ndarray.tofile`` writes; read into memory through
    ortckpt's file layer and refused, before it is read, when larger than the model needs).
    ``reference_state`` is a ``CheckpointState`` or a checkpoint path: a full checkpoint, or a nominal
    one with ``trainable_only=False`` (the shapes then come from the training model, as ORT does).

    Raises ``TensorDataError`` for a buffer of the wrong length or dtype (saying how many values the
    model needs), ``ConversionError`` when the model and the reference do not belong together.
    """
    ref = _open_state(reference_state, "reference_state")
    only = bool(trainable_only)
    if ref.is_nominal and only:
        raise CheckpointError(
            "the reference checkpoint is nominal, so the buffer must hold every parameter: pass "
            "trainable_only=False (ORT's copy_buffer_to_parameters requires it too)"
        )
    model, inputs = _model_inputs(training_model)
    plan = _layout(ref, model, inputs, only)
    values = _buffer_values(buffer, plan, _other_size(ref, model, inputs, only), only)
    in_buffer = {slot.name: slot for slot in plan.slots}
    if ref.is_nominal:
        missing = [name for name in ref.parameters if name not in in_buffer]
        if missing:
            raise ConversionError(
                f"{model}: parameter {missing[0]!r} of the nominal reference is not an input of the "
                "training model, so the buffer cannot give it values; use a full checkpoint as reference"
            )
    params: list[Parameter] = []
    for name, old in ref.parameters.items():
        slot = in_buffer.get(name)
        if slot is None:
            params.append(old)
            continue
        values_of = values[slot.offset : slot.offset + slot.count].reshape(slot.shape)
        new = Parameter(name, values_of, trainable=old.trainable)
        new.doc_string = old.doc_string
        params.append(new)
    return CheckpointState(params, properties=ref.properties, optimizer=ref.optimizer)


def _other_size(state: CheckpointState, model: str, inputs: list[_Input], trainable_only: bool) -> int:
    """The buffer size with ``trainable_only`` flipped (for the hint of a length error), or -1
    when that buffer could not be made."""
    if state.is_nominal and not trainable_only:
        return -1
    try:
        return _layout(state, model, inputs, not trainable_only).size
    except CheckpointError:
        return -1


def _buffer_values(buffer: object, plan: Layout, other_size: int, trainable_only: bool) -> NDArray[Any]:
    """``buffer`` as a flat little-endian float32 array of ``plan.size`` elements, or an error
    that says what the model needs (``other_size``: the size with ``trainable_only`` flipped)."""
    if isinstance(buffer, (str, os.PathLike)):
        values = read_buffer_file(buffer, plan, max(plan.size, other_size))
    elif isinstance(buffer, (bytes, bytearray, memoryview)):
        view = memoryview(buffer)
        # a strided view (say of every other element) is copied into order first: cast needs one
        raw = (view if view.c_contiguous else memoryview(view.tobytes())).cast("B")
        if len(raw) % BUFFER_DTYPE.itemsize:
            raise TensorDataError(
                f"the buffer has {len(raw)} bytes, not a whole number of float32 values "
                f"({plan.model} with this checkpoint needs {plan.size} values, {4 * plan.size} bytes)"
            )
        values = np.frombuffer(raw, dtype=BUFFER_DTYPE)
    else:
        array = np.asarray(buffer)
        if array.dtype.kind != "f" or array.dtype.itemsize != BUFFER_DTYPE.itemsize:
            raise TensorDataError(
                f"the buffer is {array.dtype}, but ORT's parameter buffers are float32; convert it "
                "with buffer.astype(numpy.float32) if losing precision is acceptable"
            )
        values = np.ascontiguousarray(array, dtype=BUFFER_DTYPE).reshape(-1)
    if values.size != plan.size:
        raise TensorDataError(_length_message(values.size, plan, other_size, trainable_only))
    return values


def _length_message(got: int, plan: Layout, other: int, trainable_only: bool) -> str:
    which = "trainable parameters" if trainable_only else "parameters"
    text = (
        f"the buffer holds {got} float32 values but {plan.model} with this checkpoint needs {plan.size} "
        f"(its {len(plan.slots)} {which})"
    )
    if got == other and other != plan.size:
        return f"{text}; it has the size of trainable_only={not trainable_only}: pass that"
    return f"{text}: the buffer was made for another model or checkpoint"


def read_buffer_file(path: StrPath, plan: Layout, max_values: int) -> NDArray[Any]:
    """The float32 values of the buffer file ``path`` (raw little-endian), read into private memory
    by the core (regular files only, never blocking); a file of more than ``max_values`` values is
    refused before it is read."""
    shown = os.fsdecode(os.fspath(path))
    try:
        data = _native.MappedFile.read(path, max_values * BUFFER_DTYPE.itemsize)
    except SourceTooLargeError:
        raise TensorDataError(
            f"{shown}: the buffer file is larger than the {4 * plan.size} bytes ({plan.size} float32 "
            f"values) {plan.model} with this checkpoint needs: it was made for another model or checkpoint"
        ) from None
    if len(data) % BUFFER_DTYPE.itemsize:
        raise TensorDataError(
            f"{shown}: the buffer file has {len(data)} bytes, not a whole number of float32 values "
            f"({plan.model} with this checkpoint needs {plan.size} values, {4 * plan.size} bytes)"
        )
    return np.frombuffer(memoryview(data), dtype=BUFFER_DTYPE)


def write_buffer_file(values: NDArray[Any], path: StrPath) -> None:
    """Write ``values`` as raw little-endian float32 to ``path``, atomically (``_atomic``)."""
    from .._atomic import atomic_file

    data = np.ascontiguousarray(values, dtype=BUFFER_DTYPE)
    with atomic_file(path) as f:
        f.write(data.data.cast("B"))
