"""Build the ``spec`` dict that ``_native.save_checkpoint`` / ``serialize_checkpoint`` take.

This is the per-tensor Python part of a save (a checkpoint can hold 100,000 tensors), so it does
as little as it can per tensor: one flat tuple ``(name, data_type, shape, data)`` each, the shape
tuple as it is, the state's own dict order (the core sorts), an in-memory array handed over as it
is when numpy can export it, and no cyclic garbage collection while the tuples are built (they
are not garbage; collecting would only scan them). Every rule (names, sizes, nominal tensors,
versions) is checked once, by the core.
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

from ._dtypes import STRING
from ._optimizer import momentum_tensors
from ._parameter import tensor_of
from ._tensor import ArrayTensor, IndexedTensor

if TYPE_CHECKING:
    from ._native import CheckpointSpec, OptimizerGroupSpec, TensorSpec
    from ._state_view import StateView
    from ._tensor import SpecData, Tensor


def build_spec(state: StateView, include_optimizer_state: bool, format_version: int) -> CheckpointSpec:
    """The native spec of ``state``: tensor data are borrowed (no copies), in state order."""
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _build(state, include_optimizer_state, format_version)
    finally:
        if gc_was_enabled:
            gc.enable()


def _data(tensor: Tensor, name: str) -> SpecData:
    """``tensor.spec_data(name)``, but an in-memory array of a builtin numpy type (native byte
    order, C-contiguous, at least 1-D) is passed as it is: numpy exports it through the buffer
    protocol, and the flat uint8 view ``spec_data`` makes (for what cannot be exported so: ml_dtypes'
    types such as bfloat16, and 0-d arrays, which export no shape) costs more than the rest of the
    tensor's save."""
    if type(tensor) is ArrayTensor and tensor.data_type != STRING:
        array = tensor.array(name)
        if array.ndim and array.dtype.isbuiltin == 1 and array.flags.c_contiguous:
            # numpy's stubs declare __buffer__ only for Python >= 3.12
            return array  # type: ignore[return-value]
    return tensor.spec_data(name)


def _build(state: StateView, include_optimizer_state: bool, format_version: int) -> CheckpointSpec:
    trainable: list[TensorSpec] = []
    frozen: list[TensorSpec] = []
    add_trainable = trainable.append
    add_frozen = frozen.append
    # a loaded state's untouched parameters: their specs in one native call (the files checked once)
    loaded, own = state.parameters._save_parts()
    for is_trainable, loaded_spec in loaded:
        if is_trainable:
            add_trainable(loaded_spec)
        else:
            add_frozen(loaded_spec)
    for name, param in own:
        # A nominal tensor's data is None; the core refuses it outside a nominal checkpoint. A
        # nominal checkpoint may still hold values (ORT writes such files when it re-saves a
        # nominal state); they are written back as they are, so loading and saving loses nothing.
        tensor = tensor_of(param)
        doc = param.doc_string
        spec: TensorSpec = (
            (name, tensor.data_type, tensor.shape, _data(tensor, name), doc)
            if doc
            else (name, tensor.data_type, tensor.shape, _data(tensor, name))
        )
        if param.trainable:
            add_trainable(spec)
        else:
            add_frozen(spec)

    groups: list[OptimizerGroupSpec] = []
    if include_optimizer_state and state.optimizer is not None:
        # a loaded state's untouched momentums: every file checked once per index, in one native
        # call, then their bytes viewed without a call each
        prepared: set[int] = set()
        for group in state.optimizer.values():
            for momentums in group.states.values():
                for _, tensor in momentum_tensors(momentums):
                    if type(tensor) is IndexedTensor and id(tensor.index) not in prepared:
                        tensor.index.prepare_momentums()
                        prepared.add(id(tensor.index))

        def momentum_data(tensor: Tensor, name: str) -> SpecData:
            if type(tensor) is IndexedTensor and id(tensor.index) in prepared:
                return tensor.prepared_bytes()
            return _data(tensor, name)

        for group_name, group in state.optimizer.items():
            states: list[tuple[str, list[TensorSpec]]] = [
                (
                    param_name,
                    [
                        (momentum, tensor.data_type, tensor.shape, momentum_data(tensor, momentum))
                        for momentum, tensor in momentum_tensors(momentums)
                    ],
                )
                for param_name, momentums in group.states.items()
            ]
            groups.append(
                {
                    "name": group_name,
                    "step": group.step,
                    "initial_learning_rate": group.initial_learning_rate,
                    "states": states,
                }
            )

    return {
        "version": format_version,
        "is_nominal": state.is_nominal,
        "trainable": trainable,
        "frozen": frozen,
        "optimizer_groups": groups,
        "properties": list(state.properties.items()),
    }
