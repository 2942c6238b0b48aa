"""``export_for_inference``: the inference model ORT's ``Module.export_model_for_inferencing`` made
from the eval model of ``generate_artifacts`` and a trained checkpoint, without onnxruntime-training.

The rules are ORT 1.19.2's (training_api/module.cc: ``TransformModelOutputsForInference``, then
``TransformModelInputsForInference``; checked against it by tests/ort/test_ort_export.py):

* The outputs are exactly ``output_names``, in that order; each may name any value of the main
  graph (a graph output, an intermediate value, an input or an initializer). Nodes that none of them
  depends on are dropped (dependencies include the outer-scope values subgraphs use).
* Every input of the eval model that is a parameter of the checkpoint becomes an initializer with
  the checkpoint's name, data type, dims and values (``raw_data``), appended after the eval model's
  own initializers in the order of the inputs. Inputs that are not parameters stay inputs if a kept
  node still uses them (labels and other loss inputs go); an input that is itself a requested output
  is kept too (ORT would drop it and write an invalid model).
* Initializers nothing kept uses are dropped (parameters included). Initializers of the eval model
  keep their own values, also when the checkpoint has a parameter of that name (ORT changes only
  inputs); an initializer listed among the inputs stops being one.
* Everything else of the model is kept: opset imports, IR version, metadata, functions. (ORT also
  lists every operator domain it knows in the opset imports, writes the nodes in its own topological
  order and keeps stale value_info; none of that changes what the model computes.)

Checks ORT does not make, each raising with the file, the name and the remedy: a nominal checkpoint;
an output name that is not in the graph; an input among the parameters the checkpoint lacks (see
``user_inputs``); a parameter whose data type or dims differ from the eval model's input.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, overload

from .. import _dtypes
from .._parameter import Parameter, tensor_of
from .._paths import StrPath, path_str
from .._sources import open_state
from .._tensor import Tensor
from .._types import CheckpointSource
from ..errors import CheckpointError, ExternalDataError, ModelError, TensorDataError
from ..formats._onnx_external import ExternalFiles, external_tensor
from ..formats._onnx_import import require_onnx
from ..formats._onnx_write import Initializer, data_path, full_protos, write_model
from ..formats.onnx_io import _load_model

if TYPE_CHECKING:
    import onnx
    from google.protobuf.message import Message
    from typing_extensions import Buffer

    from ..state import CheckpointState

__all__ = ["export_for_inference"]


@dataclass
class ExportPlan:
    """The inference model before its initializers are written: ``model``'s graph has none;
    ``initializers`` lists them in order (their values still in the checkpoint and eval model)."""

    model: onnx.ModelProto
    initializers: list[Initializer]
    parameters: list[str]
    """The checkpoint parameters that became initializers, in order."""


def _source(what: object) -> str:
    return "the eval model" if not isinstance(what, (str, bytes, os.PathLike)) else path_str(what)


def _ckpt_name(state: CheckpointState) -> str:
    return "the checkpoint" if state.source is None else f"checkpoint {state.source}"


def _names(values: Iterable[str], what: str) -> list[str]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise TypeError(f"{what} must be a list of names, not {type(values).__name__}")
    names = list(values)
    for name in names:
        if not isinstance(name, str) or not name:
            raise TypeError(f"{what}: every name must be a non-empty str, got {name!r}")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"{what}: {twice[0]!r} is given more than once")
    return names


# ------------------------------------------------------------------------------------------------
# What the requested outputs need
# ------------------------------------------------------------------------------------------------


def _subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    from onnx import AttributeProto

    for attr in node.attribute:
        if attr.type == AttributeProto.GRAPH:
            yield attr.g
        elif attr.type == AttributeProto.GRAPHS:
            yield from attr.graphs


def _node_inputs(node: onnx.NodeProto) -> set[str]:
    """The values a node reads: its inputs and the outer-scope values of its subgraphs (ORT's
    implicit inputs)."""
    names = {name for name in node.input if name}
    for graph in _subgraphs(node):
        names |= _outer_names(graph)
    return names


def _outer_names(graph: onnx.GraphProto) -> set[str]:
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    defined |= {s.values.name for s in graph.sparse_initializer}
    used: set[str] = set()
    for node in graph.node:
        defined.update(node.output)
        used |= _node_inputs(node)
    return used - defined


def _kept_nodes(graph: onnx.GraphProto, outputs: list[str]) -> tuple[list[int], set[str]]:
    """(indices of the nodes the outputs depend on, in graph order; the values they read)."""
    producer: dict[str, int] = {}
    for i, node in enumerate(graph.node):
        for name in node.output:
            if name:
                producer.setdefault(name, i)
    reads = [_node_inputs(node) for node in graph.node]
    kept: set[int] = set()
    stack = [producer[name] for name in outputs if name in producer]
    while stack:
        i = stack.pop()
        if i not in kept:
            kept.add(i)
            stack.extend(producer[name] for name in reads[i] if name in producer)
    used: set[str] = set()
    for i in kept:
        used |= reads[i]
    return sorted(kept), used


def _check_outputs(graph: onnx.GraphProto, outputs: list[str], where: str) -> None:
    values = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    values |= {s.values.name for s in graph.sparse_initializer}
    for node in graph.node:
        values.update(node.output)
        values.update(node.input)
    for name in outputs:
        if name not in values:
            have = [o.name for o in graph.output]
            raise ValueError(
                f"{where}: the eval model has no value named {name!r} to export as an output "
                f"(its outputs are {have}; any graph output, node output, input or initializer "
                "name may be given)"
            )


# ------------------------------------------------------------------------------------------------
# Inputs: user inputs and parameters
# ------------------------------------------------------------------------------------------------


def _split_inputs(
    inputs: list[onnx.ValueInfoProto],
    state: CheckpointState,
    user_inputs: list[str] | None,
    where: str,
) -> tuple[list[onnx.ValueInfoProto], list[onnx.ValueInfoProto]]:
    """(user inputs, parameter inputs) of the eval model, each in input order."""
    params = state.parameters
    ckpt = _ckpt_name(state)
    names = [v.name for v in inputs]
    if user_inputs is not None:
        for name in user_inputs:
            if name not in names:
                raise ValueError(f"{where}: user_inputs names {name!r}, which is not an input ({names})")
            if name in params:
                raise ValueError(
                    f"{where}: user_inputs names {name!r}, which is a parameter of {ckpt}: "
                    "it becomes an initializer; leave it out of user_inputs"
                )
        users = [v for v in inputs if v.name in user_inputs]
        for v in inputs:
            if v.name not in user_inputs and v.name not in params:
                raise ValueError(
                    f"{where}: input {v.name!r} is neither in user_inputs nor a parameter of {ckpt}: "
                    "add it to user_inputs, or export from the checkpoint trained with these artifacts"
                )
        return users, [v for v in inputs if v.name in params]
    first = next((i for i, v in enumerate(inputs) if v.name in params), None)
    if first is None:
        raise ValueError(
            f"{where}: none of the eval model's inputs {names} is a parameter of {ckpt} "
            f"({len(params)} parameters): export from the checkpoint of these training artifacts"
        )
    for v in inputs[first:]:
        if v.name not in params:
            raise ValueError(
                f"{where}: {ckpt} has no parameter {v.name!r}: generate_artifacts lists the user "
                f"inputs ({names[:first]}) first, then every trainable and frozen parameter, and "
                f"{v.name!r} comes among the parameters. Export from the checkpoint trained with "
                "these artifacts; if it is an input the model is fed, name all such inputs with "
                "user_inputs= (CLI: --user-input)"
            )
    return inputs[:first], inputs[first:]


def _check_parameter(v: onnx.ValueInfoProto, param: Parameter, where: str, ckpt: str) -> None:
    kind = v.type.WhichOneof("value")
    if kind != "tensor_type":
        raise TensorDataError(
            f"{where}: input {v.name!r} is a {kind}, not a tensor; it cannot take a parameter"
        )
    declared = v.type.tensor_type
    if declared.elem_type != param.data_type:
        raise TensorDataError(
            f"{where}: parameter {v.name!r} is {_dtypes.type_name(declared.elem_type)} in the eval model "
            f"but {_dtypes.type_name(param.data_type)} in {ckpt}: export with the checkpoint trained "
            "with these artifacts"
        )
    if not declared.HasField("shape"):
        return
    dims = declared.shape.dim
    fixed = [d.dim_value if d.HasField("dim_value") else None for d in dims]
    if len(fixed) != len(param.shape) or any(d is not None and d != s for d, s in zip(fixed, param.shape)):
        shown = [d if d is not None else "?" for d in fixed]
        raise TensorDataError(
            f"{where}: parameter {v.name!r} has shape {shown} in the eval model but "
            f"{list(param.shape)} in {ckpt}: export with the checkpoint trained with these artifacts"
        )


def _parameter_initializer(name: str, param: Parameter) -> Initializer:
    """The TensorProto ORT makes of a parameter (``CopyTensorToTensorProto``): name, data type,
    dims and raw_data (string_data for strings); no doc_string."""
    from onnx import TensorProto

    tensor = tensor_of(param)
    proto = TensorProto()
    proto.name = name
    proto.data_type = tensor.data_type
    proto.dims.extend(int(d) for d in tensor.shape)
    if tensor.data_type == _dtypes.STRING:
        strings = tensor.spec_data(name)
        assert isinstance(strings, list)
        proto.string_data.extend(s.encode("utf-8") for s in strings)
        return Initializer(proto)
    return Initializer(proto, tensor.nbytes, lambda: _buffer(tensor, name))


def _buffer(tensor: Tensor, name: str) -> Buffer:
    """A numeric tensor's bytes (checked against its file first, for a loaded checkpoint)."""
    data = tensor.spec_data(name)
    assert data is not None and not isinstance(data, list)
    return data


#: ONNX data types a checkpoint cannot hold, with their bits per element (packed): their
#: initializers are checked for dims and size here, the others by the checkpoint reader's rules.
_PACKED_BITS = {21: 4, 22: 4, 23: 4, 24: 8, 25: 2, 26: 2}  # (u)int4, float4e2m1, float8e8m0, (u)int2


def _check_own(proto: onnx.TensorProto, files: ExternalFiles, where: str) -> None:
    """An initializer of the eval model, checked as the checkpoint reader checks a tensor (known
    data type, non-negative dims, values that match them in size, one storage form), so that the
    export never writes a model ONNX or ORT would refuse."""
    from ..formats._proto_decode import tensor_from_proto

    name = proto.name
    try:
        bits = _PACKED_BITS.get(proto.data_type)
        if bits is None:
            tensor_from_proto(proto, name, files, nominal=False)
            return
        dims = [int(d) for d in proto.dims]
        if proto.data_location == proto.EXTERNAL:
            raise TensorDataError(f"tensor {name!r}: external data of this data type is not supported")
        if any(d < 0 for d in dims):
            raise TensorDataError(f"tensor {name!r}: negative dimension in dims {dims}")
        if proto.HasField("raw_data"):
            expected = -(-math.prod(dims) * bits // 8)
            if len(proto.raw_data) != expected:
                raise TensorDataError(
                    f"tensor {name!r}: dims {dims} need {expected} bytes of raw_data, it has "
                    f"{len(proto.raw_data)}"
                )
    except (TensorDataError, ExternalDataError) as exc:
        raise type(exc)(f"{where}: initializer of the eval model: {exc}") from None


def _own_initializer(proto: onnx.TensorProto, files: ExternalFiles) -> Initializer:
    """An initializer of the eval model, its values moved out of the proto (or mapped from its
    external data file) so they are streamed like the parameters'."""
    from onnx import TensorProto

    name = proto.name
    if proto.data_location == TensorProto.EXTERNAL:
        mapped = external_tensor(proto, name, proto.data_type, tuple(proto.dims), files)
        proto.ClearField("external_data")
        proto.ClearField("data_location")
        # a detached copy (the graph's initializers are cleared next), now without its values
        return Initializer(_copy(proto), mapped.nbytes, lambda: _buffer(mapped, name))
    if proto.HasField("raw_data"):
        data = proto.raw_data
        proto.ClearField("raw_data")
        return Initializer.of(_copy(proto), data)
    return Initializer(_copy(proto))


# ------------------------------------------------------------------------------------------------
# The plan
# ------------------------------------------------------------------------------------------------


def _output_infos(model: onnx.ModelProto, outputs: list[str], where: str) -> list[onnx.ValueInfoProto]:
    """A ValueInfoProto for each output: the eval model's own declaration of that value (graph
    output, input, value_info), an initializer's type, or the type derived from the declared ones
    through the node producing it (``_export_types``). ONNX shape inference is never run on the
    model (C++ code that hostile models crash); an output whose type can be neither found nor
    derived is refused, by name."""
    from ._export_types import Deriver, Underived, value_info

    graph = model.graph
    declared: dict[str, onnx.ValueInfoProto] = {}
    for v in [*graph.value_info, *graph.input, *graph.output]:  # later ones win
        if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type:
            declared[v.name] = v
    deriver = Deriver(graph)
    infos = []
    for name in outputs:
        if name in declared:
            infos.append(_copy(declared[name]))
            continue
        try:
            infos.append(value_info(name, deriver.type_of(name)))
        except Underived as why:
            raise ModelError(
                f"{where}: the type of output {name!r} is not declared in the eval model and cannot "
                f"be derived from what it declares ({why}). ortckpt does not run ONNX shape inference "
                "on the models it is given (C++ code that hostile models crash): export a declared "
                "output, or add the value's type to the model's value_info (e.g. with "
                "onnx.shape_inference.infer_shapes on a model you trust)"
            ) from None
    return infos


def plan_export(
    eval_model: onnx.ModelProto | StrPath,
    checkpoint: CheckpointSource,
    output_names: Iterable[str],
    user_inputs: Iterable[str] | None = None,
) -> ExportPlan:
    """Everything ``export_for_inference`` checks and decides, without writing (``--dry-run``)."""
    require_onnx("export_for_inference")
    outputs = _names(output_names, "output_names")
    if not outputs:
        raise ValueError("output_names is empty: name at least one output of the eval model")
    users = None if user_inputs is None else _names(user_inputs, "user_inputs")
    where = _source(eval_model)
    state = open_state(checkpoint)
    ckpt = _ckpt_name(state)
    if state.is_nominal:
        raise CheckpointError(
            f"{ckpt} is nominal (names and data types, no values): export from a checkpoint saved "
            "after training (ORT refuses a nominal state too)"
        )
    model, model_dir = _load_model(eval_model, "eval_model")  # ModelError when not an ONNX model
    graph = model.graph
    _check_outputs(graph, outputs, where)
    kept, used = _kept_nodes(graph, outputs)
    needed = used | set(outputs)

    own_names = {t.name for t in graph.initializer} | {s.values.name for s in graph.sparse_initializer}
    inputs = [v for v in graph.input if v.name not in own_names]  # ORT's GetInputs()
    user_values, param_values = _split_inputs(inputs, state, users, where)
    params = state.parameters
    for v in param_values:
        _check_parameter(v, params[v.name], where, ckpt)
    output_infos = _output_infos(model, outputs, where)
    own = [t for t in graph.initializer if t.name in needed]
    if model_dir is None and any(t.data_location == t.EXTERNAL for t in own):
        raise ValueError(
            "the eval model keeps initializers in external data files: pass it as a path (not a "
            "ModelProto), so that they are found beside it"
        )
    files = ExternalFiles(model_dir)
    for t in own:
        _check_own(t, files, where)
    initializers = [_own_initializer(t, files) for t in own]
    chosen = [v.name for v in param_values if v.name in needed]
    initializers += [_parameter_initializer(name, params[name]) for name in chosen]
    _rebuild_graph(graph, kept, [v for v in user_values if v.name in needed], output_infos, needed)
    return ExportPlan(model, initializers, chosen)


def _rebuild_graph(
    graph: onnx.GraphProto,
    kept: list[int],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    needed: set[str],
) -> None:
    """Keep the ``kept`` nodes, set the inputs and outputs, drop every initializer (written
    separately), the sparse initializers nothing needs and the value_info of values now gone."""
    nodes = [_copy(graph.node[i]) for i in kept]
    present = needed | {name for node in nodes for name in node.output}
    declared = {v.name for v in inputs} | {v.name for v in outputs}
    infos = [v for v in graph.value_info if v.name in present and v.name not in declared]
    sparse = [s for s in graph.sparse_initializer if s.values.name in needed]
    fresh: dict[str, list[Any]] = {
        "node": nodes,
        "input": [_copy(v) for v in inputs],
        "output": [_copy(v) for v in outputs],
        "value_info": [_copy(v) for v in infos],
        "sparse_initializer": [_copy(s) for s in sparse],
    }
    for field in (*fresh, "initializer"):
        graph.ClearField(field)
    for field, items in fresh.items():
        getattr(graph, field).extend(items)


_Message = TypeVar("_Message", bound="Message")


def _copy(item: _Message) -> _Message:
    """A detached copy of a protobuf message."""
    c: _Message = type(item)()
    c.CopyFrom(item)
    return c


# ------------------------------------------------------------------------------------------------
# The public function
# ------------------------------------------------------------------------------------------------


@overload
def export_for_inference(
    eval_model: onnx.ModelProto | StrPath,
    checkpoint: CheckpointSource,
    output_names: Iterable[str],
    out: None = None,
    *,
    user_inputs: Iterable[str] | None = None,
) -> onnx.ModelProto: ...
@overload
def export_for_inference(
    eval_model: onnx.ModelProto | StrPath,
    checkpoint: CheckpointSource,
    output_names: Iterable[str],
    out: StrPath,
    *,
    user_inputs: Iterable[str] | None = None,
) -> list[str]: ...
def export_for_inference(
    eval_model: onnx.ModelProto | StrPath,
    checkpoint: CheckpointSource,
    output_names: Iterable[str],
    out: StrPath | None = None,
    *,
    user_inputs: Iterable[str] | None = None,
) -> onnx.ModelProto | list[str]:
    """An inference model from the eval model ``generate_artifacts`` wrote and a trained
    checkpoint: what ORT's ``Module.export_model_for_inferencing(path, output_names)`` wrote.

    ``eval_model``: the eval model (a path, or an ``onnx.ModelProto``); ``checkpoint``: a
    ``CheckpointState``, a checkpoint file (or URL, or its bytes); ``output_names``: the outputs of
    the inference model, in order (say ``["output"]``: not the loss). The model keeps only the
    nodes these need; the checkpoint's parameters become initializers; inputs only the loss used
    (labels) go. The exact rules are in ``docs/deploy.md``.

    ``user_inputs``: the eval model's inputs that are fed data, not parameters. By default they are
    the inputs before the first input that is a checkpoint parameter, as ``generate_artifacts``
    orders them; every later input must then be a parameter of the checkpoint.

    With ``out``, the model is written there atomically and the paths written are returned: models
    over 2 GiB keep their tensors in ``<out>.data`` (ONNX external data), which ORT and
    ``onnx.load`` find beside the model. Values are streamed from the checkpoint file, never held in
    memory twice. Without ``out``, the model is returned (all values in memory).

    Raises ``CheckpointError`` for a nominal checkpoint, ``ValueError`` for an output name not in
    the graph or an input among the parameters the checkpoint lacks, ``TensorDataError`` for a
    parameter whose data type or dims differ from the eval model's input.
    """
    plan = plan_export(eval_model, checkpoint, output_names, user_inputs)
    if out is None:
        plan.model.graph.initializer.extend(full_protos(plan.initializers))
        return plan.model
    path = path_str(out)
    if write_model(plan.model, plan.initializers, path):
        return [path, data_path(path)]
    return [path]
