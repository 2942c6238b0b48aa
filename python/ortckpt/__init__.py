"""Read and write ONNX Runtime on-device training checkpoints without onnxruntime-training.

>>> import ortckpt
>>> state = ortckpt.load("checkpoint")            # memory-mapped, zero-copy
>>> state.parameters["fc1.weight"].data           # read-only numpy array
>>> state.properties["epoch"] = 4
>>> ortckpt.save(state, "checkpoint")             # atomic
"""

from typing import TYPE_CHECKING

from . import errors
from ._version import __version__
from .errors import (
    CheckpointError,
    DuplicateNameError,
    ExternalDataError,
    InvalidCheckpointError,
    TensorDataError,
    UnsupportedVersionError,
)
from .io import DEFAULT_EXTERNAL_DATA_THRESHOLD, external_data_path, load, load_bytes, save, serialize
from .state import CheckpointState, OptimizerGroup, Parameter, PropertyBag

if TYPE_CHECKING:
    from .onnx_io import (
        from_tensor_proto,
        load_into_model,
        save_from_onnx,
        save_tensor_protos,
        to_tensor_proto,
    )
del TYPE_CHECKING

# The ONNX functions live in onnx_io, imported on first use: `import ortckpt` stays cheap for the
# many programs that never touch an ONNX model.
_ONNX_FUNCTIONS = frozenset(
    {"from_tensor_proto", "load_into_model", "save_from_onnx", "save_tensor_protos", "to_tensor_proto"}
)


def __getattr__(name: str) -> object:
    if name in _ONNX_FUNCTIONS:
        from . import onnx_io

        return getattr(onnx_io, name)
    raise AttributeError(f"module 'ortckpt' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _ONNX_FUNCTIONS)

__all__ = [
    "DEFAULT_EXTERNAL_DATA_THRESHOLD",
    "CheckpointError",
    "CheckpointState",
    "DuplicateNameError",
    "ExternalDataError",
    "InvalidCheckpointError",
    "OptimizerGroup",
    "Parameter",
    "PropertyBag",
    "TensorDataError",
    "UnsupportedVersionError",
    "__version__",
    "errors",
    "external_data_path",
    "from_tensor_proto",
    "load",
    "load_bytes",
    "load_into_model",
    "save",
    "save_from_onnx",
    "save_tensor_protos",
    "serialize",
    "to_tensor_proto",
]
