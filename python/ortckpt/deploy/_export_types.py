"""The type of an exported output the eval model does not declare, derived in Python from what it
declares (inputs, value_info, outputs, initializers) through the node that produces it.

Why not onnx's shape inference: it is C++ code, and hostile models crash it (SIGSEGV on a
``GatherND`` or ``LabelEncoder`` node, even one no output needs); ortckpt never runs it on the
models it is given. ``generate_artifacts`` drops the declarations of the base model's outputs
(``output``, ``logits``) from the eval model while keeping those of everything else, so the values
an export asks for are one or two simple nodes away from declared ones. Derived here, as ONNX's
inference functions define them: element-wise unary operators (the input's type), broadcasting
binary and variadic ones (multidirectional broadcasting), ``MatMul``, ``Gemm`` and ``Cast``. A
value produced by any other operator, or whose inputs cannot be typed either, is refused by
the caller, naming the output and the operator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

#: (dim_value, dim_param): (3, "") a fixed size, (None, "batch") a named one, (None, "") unknown
Dim = tuple[int | None, str]

_SAME_AS_INPUT = frozenset(
    "Abs Ceil Celu Clip Cos Dropout Elu Erf Exp Floor Gelu HardSigmoid HardSwish Identity "
    "LeakyRelu Log LogSoftmax Mish Neg Reciprocal Relu Round Selu Sigmoid Sign Sin Softmax "
    "Softplus Softsign Sqrt Tan Tanh ThresholdedRelu".split()
)
_BROADCAST = frozenset("Add Sub Mul Div Pow PRelu Max Min Sum Mean".split())
#: the longest chain of undeclared values followed back to declared ones
_MAX_DEPTH = 64


@dataclass(frozen=True)
class Typed:
    """A tensor's element type and shape (None: rank unknown)."""

    elem_type: int
    dims: tuple[Dim, ...] | None


class Underived(Exception):
    """Why a value's type cannot be derived (for the caller's error)."""


def _declared(value: onnx.ValueInfoProto) -> Typed | None:
    if not value.type.HasField("tensor_type"):
        return None
    tensor = value.type.tensor_type
    if not tensor.elem_type:
        return None
    if not tensor.HasField("shape"):
        return Typed(tensor.elem_type, None)
    dims = tuple(
        (int(d.dim_value), "") if d.HasField("dim_value") else (None, _param(d.dim_param))
        for d in tensor.shape.dim
    )
    return Typed(tensor.elem_type, dims)


def _param(name: object) -> str:
    """A dim's name; protobuf hands a name that is not UTF-8 over as bytes: an unnamed dim then
    (a derived type must be one ONNX can hold)."""
    return name if isinstance(name, str) else ""


def _broadcast(shapes: list[tuple[Dim, ...]], op: str) -> tuple[Dim, ...]:
    """ONNX's multidirectional broadcasting of known-rank shapes."""
    rank = max(len(s) for s in shapes)
    out: list[Dim] = []
    for axis in range(rank):
        column = [s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0]
        sizes = {v for v, _ in column if v is not None and v != 1}
        if len(sizes) > 1:
            raise Underived(f"{op} of shapes that do not broadcast ({sorted(sizes)})")
        if sizes:
            out.append((sizes.pop(), ""))
            continue
        named = {p for v, p in column if v is None and p}
        unknown = any(v is None and not p for v, p in column)
        if len(named) == 1 and not unknown:
            out.append((None, named.pop()))
        elif named or unknown:
            out.append((None, ""))
        else:
            out.append((1, ""))  # every one of them is 1
    return tuple(out)


def _matmul(a: tuple[Dim, ...], b: tuple[Dim, ...]) -> tuple[Dim, ...]:
    """numpy.matmul's shape (ONNX MatMul), from shapes of known rank."""
    if not a or not b:
        raise Underived("MatMul of a scalar")
    left = ((1, ""), *a) if len(a) == 1 else a
    right = (*b, (1, "")) if len(b) == 1 else b
    k1, k2 = left[-1], right[-2]
    if k1[0] is not None and k2[0] is not None and k1[0] != k2[0]:
        raise Underived(f"MatMul of inner sizes {k1[0]} and {k2[0]}")
    batch = _broadcast([left[:-2], right[:-2]], "MatMul") if len(left) > 2 or len(right) > 2 else ()
    out = (*batch, *(left[-2:-1] if len(a) > 1 else ()), *(right[-1:] if len(b) > 1 else ()))
    return tuple(out)


class Deriver:
    """Types of a graph's values, derived on demand from its declarations."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        self.known: dict[str, Typed] = {}
        for v in [*graph.value_info, *graph.input, *graph.output]:  # later ones win
            typed = _declared(v)
            if typed is not None:
                self.known[v.name] = typed
        for t in graph.initializer:
            self.known.setdefault(t.name, Typed(t.data_type, tuple((int(d), "") for d in t.dims)))
        self.producer: dict[str, onnx.NodeProto] = {}
        for node in graph.node:
            for name in node.output:
                if name:
                    self.producer.setdefault(name, node)

    def type_of(self, name: str, depth: int = 0) -> Typed:
        """The type of value ``name``: declared, else derived (``Underived`` saying why not)."""
        if name in self.known:
            return self.known[name]
        if depth > _MAX_DEPTH:
            raise Underived(f"more than {_MAX_DEPTH} undeclared values lead to it")
        node = self.producer.get(name)
        if node is None:
            raise Underived("no node produces it")
        typed = self._derive(node, name, depth)
        self.known[name] = typed
        return typed

    def _input(self, node: onnx.NodeProto, i: int, depth: int) -> Typed:
        if i >= len(node.input) or not node.input[i]:
            raise Underived(f"its {node.op_type} node lacks input {i}")
        return self.type_of(node.input[i], depth + 1)

    def _derive(self, node: onnx.NodeProto, name: str, depth: int) -> Typed:
        op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
        if name != node.output[0]:
            raise Underived(f"it is output {list(node.output).index(name)} of a {op} node")
        if op in _SAME_AS_INPUT:
            return self._input(node, 0, depth)
        if op == "Cast":
            to = next((a.i for a in node.attribute if a.name == "to"), 0)
            if not to:
                raise Underived("its Cast node has no 'to'")
            return Typed(int(to), self._input(node, 0, depth).dims)
        if op in _BROADCAST or op == "MatMul" or op == "Gemm":
            inputs = [self._input(node, i, depth) for i in range(len(node.input)) if node.input[i]]
            if not inputs or any(t.dims is None for t in inputs):
                raise Underived(f"the rank of an input of its {op} node is unknown")
            shapes = [t.dims for t in inputs if t.dims is not None]
            if op == "MatMul" and len(shapes) == 2:
                return Typed(inputs[0].elem_type, _matmul(shapes[0], shapes[1]))
            if op == "Gemm" and len(shapes) >= 2 and len(shapes[0]) == 2 and len(shapes[1]) == 2:
                flags = {a.name: a.i for a in node.attribute}
                m = shapes[0][1] if flags.get("transA") else shapes[0][0]
                n = shapes[1][0] if flags.get("transB") else shapes[1][1]
                return Typed(inputs[0].elem_type, (m, n))
            if op in _BROADCAST:
                return Typed(inputs[0].elem_type, _broadcast(shapes, op))
            raise Underived(f"its {op} node has inputs of unexpected ranks")
        raise Underived(f"it is produced by a {op} node, whose output type ortckpt does not derive")


def value_info(name: str, typed: Typed) -> onnx.ValueInfoProto:
    """The ValueInfoProto of a derived type (what onnx's inference writes for it)."""
    from onnx import TensorShapeProto, helper

    if typed.dims is None:
        return helper.make_tensor_value_info(name, typed.elem_type, None)
    info = helper.make_tensor_value_info(name, typed.elem_type, [])
    shape = info.type.tensor_type.shape
    for value, param in typed.dims:
        dim = TensorShapeProto.Dimension()
        if value is not None:
            dim.dim_value = value
        elif param:
            dim.dim_param = param
        shape.dim.append(dim)
    return info
