"""Build the ``spec`` dict that ``_native.write_checkpoint`` / ``serialize_checkpoint`` take."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._native import WRITTEN_VERSION as FORMAT_VERSION
from ._tensor import Tensor
from .errors import CheckpointError

if TYPE_CHECKING:
    from ._native import CheckpointSpec, OptimizerGroupSpec, TensorSpec
    from .state import CheckpointState


def _tensor_spec(name: str, tensor: Tensor, nominal: bool) -> TensorSpec:
    if tensor.is_nominal:
        if not nominal:
            raise CheckpointError(
                f"parameter {name!r} is nominal (has no values) in a non-nominal checkpoint"
            )
        return (name, tensor.data_type, list(tensor.shape), None)
    # A nominal checkpoint may still hold values (ORT writes such files when it re-saves a nominal
    # state); they are written back as they are, so loading and saving loses nothing.
    return (name, tensor.data_type, list(tensor.shape), tensor.spec_data(name))


def build_spec(
    state: CheckpointState, include_optimizer_state: bool, format_version: int = FORMAT_VERSION
) -> CheckpointSpec:
    # the core refuses versions it cannot write, and nominal states as version 1
    nominal = state.is_nominal
    trainable: list[TensorSpec] = []
    frozen: list[TensorSpec] = []
    for name, param in state.parameters.items():
        spec = _tensor_spec(name, param._tensor, nominal)
        (trainable if param.trainable else frozen).append(spec)

    groups: list[OptimizerGroupSpec] = []
    if include_optimizer_state and state.optimizer is not None:
        for group_name, group in state.optimizer.items():
            groups.append(
                {
                    "name": group_name,
                    "step": group.step,
                    "initial_learning_rate": group.initial_learning_rate,
                    "states": [
                        (
                            param_name,
                            [
                                (momentum, tensor.data_type, list(tensor.shape), tensor.spec_data(momentum))
                                for momentum, tensor in momentums._items()
                            ],
                        )
                        for param_name, momentums in group.states.items()
                    ],
                }
            )

    return {
        "version": format_version,
        "is_nominal": nominal,
        "trainable": trainable,
        "frozen": frozen,
        "optimizer_groups": groups,
        "properties": list(state.properties.items()),
    }
