"""Read and write ONNX Runtime on-device training checkpoints without onnxruntime-training.

>>> import ortckpt
>>> state = ortckpt.load("checkpoint")            # memory-mapped, zero-copy
>>> state.parameters["fc1.weight"].data           # read-only numpy array
>>> state.properties["epoch"] = 4
>>> ortckpt.save(state, "checkpoint")             # crash-consistent
"""

import typing as _typing

from . import errors

# The server side (docs/federated.md): fsspec URLs for load; the ONNX functions, conversions and
# validated averaging are imported on first use (module __getattr__ below), so that
# ``import ortckpt`` stays fast for the many programs that use none of them.
from ._sources import load
from ._version import __version__
from .errors import (
    CheckpointChangedError,
    CheckpointError,
    ConversionError,
    DuplicateNameError,
    ExternalDataError,
    InterruptedSaveError,
    InvalidCheckpointError,
    ModelError,
    RemoteSourceError,
    ServerStateError,
    SourceTooLargeError,
    TensorDataError,
    UnsupportedVersionError,
)
from .io import DEFAULT_EXTERNAL_DATA_THRESHOLD, external_data_path, load_bytes, recover, save, serialize
from .state import CheckpointState, OptimizerGroup, Parameter, PropertyBag

if _typing.TYPE_CHECKING:
    from .deploy._buffers import parameters_from_buffer, parameters_to_buffer
    from .deploy._export import export_for_inference
    from .deploy.adapters import from_adapter, to_adapter
    from .federated._privacy import AdaptiveClipping, PrivacyAccountant
    from .federated._server_opt import FedAdagrad, FedAdam, FedAvgM, FedYogi
    from .federated._server_round import ServerReport
    from .federated._server_state import ServerState, server_state, strip_server_state
    from .federated.aggregate import AggregationError, AggregationReport, Round, SourceReport, average
    from .formats.conversions import (
        convert,
        from_npz,
        from_safetensors,
        from_state_dict,
        to_nominal,
        to_npz,
        to_safetensors,
        to_state_dict,
        to_torch,
    )
    from .formats.onnx_io import (
        from_tensor_proto,
        load_into_model,
        save_from_onnx,
        save_tensor_protos,
        to_tensor_proto,
    )

_LAZY = {
    **dict.fromkeys(("parameters_from_buffer", "parameters_to_buffer"), "deploy._buffers"),
    "export_for_inference": "deploy._export",
    **dict.fromkeys(("AdaptiveClipping", "PrivacyAccountant"), "federated._privacy"),
    **dict.fromkeys(("FedAdagrad", "FedAdam", "FedAvgM", "FedYogi"), "federated._server_opt"),
    "ServerReport": "federated._server_round",
    **dict.fromkeys(("ServerState", "server_state", "strip_server_state"), "federated._server_state"),
    **dict.fromkeys(("from_adapter", "to_adapter"), "deploy.adapters"),
    **dict.fromkeys(
        ("AggregationError", "AggregationReport", "Round", "SourceReport", "average"), "federated.aggregate"
    ),
    **dict.fromkeys(
        (
            "convert",
            "from_npz",
            "from_safetensors",
            "from_state_dict",
            "to_nominal",
            "to_npz",
            "to_safetensors",
            "to_state_dict",
            "to_torch",
        ),
        "formats.conversions",  # (not "convert": that name is the function's)
    ),
    **dict.fromkeys(
        ("from_tensor_proto", "load_into_model", "save_from_onnx", "save_tensor_protos", "to_tensor_proto"),
        "formats.onnx_io",
    ),
}


#: The public modules at their import paths from before the package was grouped by concern
#: (``ortckpt.onnx_io`` is ``ortckpt/onnx_io.py``, re-exporting ``ortckpt.formats.onnx_io``):
#: ``ortckpt.onnx_io.save_from_onnx`` works after a bare ``import ortckpt``, as it did once any
#: of the module's names had been used. (``flower`` needs its extra: ``import ortckpt.flower``.)
_PUBLIC_MODULES = ("adapters", "aggregate", "conversions", "onnx_io")


def __getattr__(name: str) -> object:
    from importlib import import_module

    if name in _PUBLIC_MODULES:
        return import_module(f".{name}", __name__)  # (the import sets the attribute)
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ortckpt' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "DEFAULT_EXTERNAL_DATA_THRESHOLD",
    "AdaptiveClipping",
    "AggregationError",
    "AggregationReport",
    "CheckpointChangedError",
    "CheckpointError",
    "CheckpointState",
    "ConversionError",
    "DuplicateNameError",
    "ExternalDataError",
    "FedAdagrad",
    "FedAdam",
    "FedAvgM",
    "FedYogi",
    "InterruptedSaveError",
    "InvalidCheckpointError",
    "ModelError",
    "OptimizerGroup",
    "Parameter",
    "PrivacyAccountant",
    "PropertyBag",
    "RemoteSourceError",
    "Round",
    "ServerReport",
    "ServerState",
    "ServerStateError",
    "SourceReport",
    "SourceTooLargeError",
    "TensorDataError",
    "UnsupportedVersionError",
    "__version__",
    "average",
    "convert",
    "errors",
    "export_for_inference",
    "external_data_path",
    "from_adapter",
    "from_npz",
    "from_safetensors",
    "from_state_dict",
    "from_tensor_proto",
    "load",
    "load_bytes",
    "load_into_model",
    "parameters_from_buffer",
    "parameters_to_buffer",
    "recover",
    "save",
    "save_from_onnx",
    "save_tensor_protos",
    "serialize",
    "server_state",
    "strip_server_state",
    "to_adapter",
    "to_nominal",
    "to_npz",
    "to_safetensors",
    "to_state_dict",
    "to_tensor_proto",
    "to_torch",
]
