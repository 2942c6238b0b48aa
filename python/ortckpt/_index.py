"""Turn the result of ``_native.index_checkpoint`` into a ``CheckpointState`` (no tensor bytes read)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from . import _dtypes
from ._optimizer import Momentums, MomentumStates, OptimizerGroup
from ._parameter import Parameter
from ._properties import PropertyBag
from ._tensor import BufferTensor, NominalTensor, StringTensor, Tensor
from .errors import DuplicateNameError, ExternalDataError, TensorDataError
from .state import CheckpointState, OptimizerGroups

if TYPE_CHECKING:
    from typing_extensions import Buffer

    from ._native import CheckpointIndex, TensorInfo


class _External:
    """The external data file's bytes, when the checkpoint has one (opened up front by the loader)."""

    def __init__(self, buffer: Buffer | None, source: str) -> None:
        self._buffer = buffer
        self._source = source
        self._size = 0 if buffer is None else memoryview(buffer).nbytes

    def slice(self, name: str, offset: int, nbytes: int) -> tuple[Buffer, int]:
        if self._buffer is None:
            raise ExternalDataError(
                f"{self._source}: tensor {name!r} lives in an external data file, which is not available "
                "(pass external_data= to load_bytes)"
            )
        if offset < 0 or offset + nbytes > self._size:
            raise ExternalDataError(
                f"{self._source}: tensor {name!r} needs bytes {offset}..{offset + nbytes} of the "
                f"external data file, which has {self._size} bytes"
            )
        return self._buffer, offset


def _tensor(info: TensorInfo, buffer: Buffer, nominal: bool, external: _External, source: str) -> Tensor:
    try:
        return _make_tensor(info, buffer, nominal, external, source)
    except TensorDataError as exc:
        message = str(exc)
        if message.startswith(source):
            raise
        raise TensorDataError(f"{source}: {message}") from None


def _make_tensor(info: TensorInfo, buffer: Buffer, nominal: bool, external: _External, source: str) -> Tensor:
    name, data_type, dims, offset, nbytes, strings, external_offset = info
    shape = tuple(dims)
    # The core reports a nominal tensor as no bytes and no strings with a nonzero element count (a
    # zero-element tensor has no bytes either, but it is a real, empty tensor).
    if nominal and nbytes == 0 and strings is None and external_offset is None and math.prod(dims) != 0:
        # a tensor of a nominal checkpoint: name and data type only (the index reports "no raw data"
        # as offset 0 / nbytes 0, like an empty tensor)
        return NominalTensor(data_type, shape)
    if data_type == _dtypes.STRING:
        if strings is None:
            raise TensorDataError(f"string tensor {name!r} has no string data")
        return StringTensor(strings, shape, name)
    if external_offset is not None:
        # nbytes is the range the core checked against the file; BufferTensor checks it against
        # the data type and shape.
        buffer, offset = external.slice(name, external_offset, nbytes)
    return BufferTensor(buffer, offset, nbytes, data_type, shape, name)


def _unique(kind: str, names: list[str], source: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise DuplicateNameError(f"{source}: duplicate {kind} name {name!r}")
        seen.add(name)


def state_from_index(
    index: CheckpointIndex, buffer: Buffer, source: str, external_data: Buffer | None
) -> CheckpointState:
    nominal = index["is_nominal"]
    external = _External(external_data, source)
    params: dict[str, Parameter] = {}
    for infos, trainable in ((index["trainable"], True), (index["frozen"], False)):
        for info in infos:
            name = info[0]
            if name in params:
                raise DuplicateNameError(f"{source}: duplicate parameter name {name!r}")
            params[name] = Parameter._from_tensor(
                name, _tensor(info, buffer, nominal, external, source), trainable
            )

    optimizer: OptimizerGroups | None = None
    if index["optimizer_groups"]:
        groups: dict[str, OptimizerGroup] = {}
        for group in index["optimizer_groups"]:
            if group["name"] in groups:
                raise DuplicateNameError(f"{source}: duplicate optimizer group name {group['name']!r}")
            states = MomentumStates()
            for param_name, infos in group["states"]:
                if param_name in states:
                    raise DuplicateNameError(
                        f"{source}: optimizer group {group['name']!r} has two states for {param_name!r}"
                    )
                _unique(f"momentum of {param_name!r}", [info[0] for info in infos], source)
                tensors = {info[0]: _tensor(info, buffer, nominal, external, source) for info in infos}
                states[param_name] = Momentums._from_tensors(param_name, tensors)
            groups[group["name"]] = OptimizerGroup._from_parts(
                group["step"], group["initial_learning_rate"], states
            )
        optimizer = OptimizerGroups(groups)

    _unique("property", [name for name, _ in index["properties"]], source)
    properties = PropertyBag(index["properties"])

    return CheckpointState._from_loaded(
        version=index["version"],
        is_nominal=nominal,
        has_external_data=index["has_external_data"],
        params=params,
        optimizer=optimizer,
        properties=properties,
        source=source,
    )
