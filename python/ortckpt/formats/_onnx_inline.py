"""An ONNX model's external tensors read into the model (``raw_data``), each through ortckpt's
own decoder (``_proto_decode``) and its external-data reader (``_onnx_external``), never by onnx's
C++ code."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from .._paths import StrPath
from ._onnx_external import ExternalFiles
from ._proto_decode import tensor_from_proto

if TYPE_CHECKING:
    import onnx


def _all_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Every TensorProto of ``graph``: its initializers and its nodes' tensor attributes, in its
    subgraphs too (what ``onnx.external_data_helper`` visits)."""
    from onnx import AttributeProto

    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == AttributeProto.TENSOR:
                yield attr.t
            elif attr.type == AttributeProto.TENSORS:
                yield from attr.tensors
            elif attr.type == AttributeProto.GRAPH:
                yield from _all_tensors(attr.g)
            elif attr.type == AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    yield from _all_tensors(sub)


def inline_external_data(model: onnx.ModelProto, base_dir: StrPath) -> None:
    """Read every external tensor of ``model`` into its ``raw_data`` (what
    ``onnx.external_data_helper.load_external_data_for_model`` does), through ortckpt's own reader:
    each tensor is checked as a checkpoint tensor and its file opened inside ``base_dir`` by the
    core, never by onnx's C++ code."""
    files = ExternalFiles(base_dir)
    for proto in _all_tensors(model.graph):
        if proto.data_location != proto.EXTERNAL:
            continue
        tensor = tensor_from_proto(proto, proto.name, files, nominal=False)
        data = tensor.spec_data(proto.name)
        assert data is not None and not isinstance(data, list)  # strings are never external
        proto.raw_data = bytes(memoryview(data))
        proto.data_location = proto.DEFAULT
        del proto.external_data[:]
