"""Build the ``spec`` dict that ``_native.save_checkpoint`` / ``serialize_checkpoint`` take.

This is the per-tensor Python part of a save (a checkpoint can hold 100,000 tensors), so it does
as little as it can per tensor: one flat tuple ``(name, data_type, shape, data)`` each, the shape
tuple as it is, and no cyclic garbage collection while the tuples are built (they are not
garbage; collecting would only scan them). Every rule (names, sizes, nominal tensors, versions) is
checked once, by the core.
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._native import CheckpointSpec, OptimizerGroupSpec, TensorSpec
    from .state import CheckpointState

def build_spec(state: CheckpointState, include_optimizer_state: bool, format_version: int) -> CheckpointSpec:
    """The native spec of ``state``: tensor data are borrowed (no copies), in state order."""
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _build(state, include_optimizer_state, format_version)
    finally:
        if gc_was_enabled:
            gc.enable()


def _build(state: CheckpointState, include_optimizer_state: bool, format_version: int) -> CheckpointSpec:
    trainable: list[TensorSpec] = []
    frozen: list[TensorSpec] = []
    add_trainable = trainable.append
    add_frozen = frozen.append
    for name, param in state.parameters.items():
        # A nominal tensor's data is None; the core refuses it outside a nominal checkpoint. A
        # nominal checkpoint may still hold values (ORT writes such files when it re-saves a
        # nominal state); they are written back as they are, so loading and saving loses nothing.
        tensor = param._tensor
        spec = (name, tensor.data_type, tensor.shape, tensor.spec_data(name))
        if param.trainable:
            add_trainable(spec)
        else:
            add_frozen(spec)

    groups: list[OptimizerGroupSpec] = []
    if include_optimizer_state and state.optimizer is not None:
        for group_name, group in state.optimizer.items():
            states: list[tuple[str, list[TensorSpec]]] = [
                (
                    param_name,
                    [
                        (momentum, tensor.data_type, tensor.shape, tensor.spec_data(momentum))
                        for momentum, tensor in momentums._items()
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
