"""The parts of a loaded ``CheckpointState``, made from a native ``Index`` without reading tensor
bytes. Every rule about the file (storage kinds, lengths, ranges, unique names) was applied by the
core when it built the index; this module only wraps the records it hands out."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, cast

from . import _dtypes
from ._containers import OptimizerGroups, ParameterStore
from ._optimizer import Momentums, MomentumStates, OptimizerGroup
from ._parameter import Parameter
from ._properties import PropertyBag
from ._tensor import IndexedTensor, NominalTensor, StringTensor, Tensor

if TYPE_CHECKING:
    from collections.abc import Set as AbstractSet

    from numpy.typing import NDArray

    from ._native import Index, TensorRecord


def tensor_of(index: Index, record: TensorRecord) -> Tensor:
    """The lazy tensor for ``record``: nothing is read until its values are used."""
    shape = record.dims
    storage = record.storage
    if storage == "inline" or storage == "external":
        buffer = index.buffer if storage == "inline" else index.external
        assert buffer is not None  # the core refuses external tensors without the file
        return IndexedTensor(
            index, record.position, buffer, record.offset, record.nbytes, record.data_type, shape
        )
    if storage == "strings":
        assert record.strings is not None
        return StringTensor(record.strings, shape)
    return NominalTensor(record.data_type, shape)


def parameters(index: Index) -> ParameterStore:
    """The parameters of ``index``; each ``Parameter`` is made when first asked for."""

    def make(record: TensorRecord) -> Parameter:
        return Parameter._from_tensor(
            record.name, tensor_of(index, record), bool(record.trainable), record.doc_string
        )

    return ParameterStore(index=index, make=make, make_arrays=functools.partial(parameter_arrays, index))


def parameter_arrays(index: Index, skip: AbstractSet[str]) -> dict[str, NDArray[Any]]:
    """The values of every parameter of ``index`` not named in ``skip``, sorted by name, in one
    pass: one check of the files and the arrays made in one native call, no ``Parameter`` object
    (what ``CheckpointState.to_numpy`` reads). The few tensors that call cannot view (strings,
    empty, misaligned, nominal) go through the ``.data`` path."""
    arrays, others = index.parameter_arrays(_dtypes.to_numpy, skip)
    for name in others:
        record = index.parameter(name)
        assert record is not None  # the index just listed it
        arrays[name] = tensor_of(index, record).array(name)
    return cast("dict[str, NDArray[Any]]", arrays)


def optimizer_groups(index: Index) -> OptimizerGroups | None:
    groups = index.optimizer_groups()
    if not groups:
        return None
    out: dict[str, OptimizerGroup] = {}
    for name, step, learning_rate, states in groups:
        momentum_states = MomentumStates()
        for param_name, records in states:
            tensors = {r.name: tensor_of(index, r) for r in records}
            momentum_states[param_name] = Momentums._from_tensors(param_name, tensors)
        out[name] = OptimizerGroup._from_parts(step, learning_rate, momentum_states)
    return OptimizerGroups(out)


def properties(index: Index) -> PropertyBag:
    return PropertyBag(index.properties())
