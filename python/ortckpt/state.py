"""``CheckpointState``: the whole content of an ORT training checkpoint.

``Parameter``, ``OptimizerGroup`` and ``PropertyBag`` live in their own modules and are re-exported
here; the mappings a state is made of are in ``_containers``.

Imports run one way: ``io`` (load, save) builds on this module, never the reverse; the
convenience methods ``save``, ``to_bytes``, ``load_checkpoint`` and ``save_checkpoint`` use
``_persist``, which both share and which never imports this module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from . import _dtypes, _index, _native, _persist
from ._containers import OptimizerGroups, ParameterMap, ParameterStore, ParameterView, _own
from ._html import state_html
from ._optimizer import Momentums, MomentumStates, OptimizerGroup
from ._parameter import Parameter
from ._paths import StrPath
from ._properties import PropertyBag, PropertyInput
from ._scalars import PropertyValue, check_name
from .errors import DuplicateNameError

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = [
    "CheckpointState",
    "MomentumStates",
    "Momentums",
    "OptimizerGroup",
    "Parameter",
    "PropertyBag",
    "PropertyValue",
]

# values: array-likes or Parameter objects (Any, so that dicts mixing array types type-check)
ParametersInput = Mapping[str, Any] | Iterable[Parameter]

#: The checkpoint format version written by ORT 1.19.2 (and by ortckpt).
FORMAT_VERSION: int = _native.WRITTEN_VERSION


def _collect(items: ParametersInput | None, frozen: bool, out: dict[str, Parameter]) -> None:
    if items is None:
        return
    what = "frozen" if frozen else "parameters"
    flag: bool | None = False if frozen else None
    if isinstance(items, Mapping):
        for key, value in items.items():
            name = check_name(key, "parameter")
            if isinstance(value, Parameter):
                if value.name != name:
                    raise ValueError(f"{what}: key {name!r} holds Parameter named {value.name!r}")
                param = _own(value, flag)
            else:
                param = Parameter(name, value, trainable=not frozen)
            _add_new(out, param)
        return
    if isinstance(items, (str, bytes)):
        raise TypeError(f"{what} must be a mapping of name -> array or an iterable of Parameter")
    for value in items:
        if not isinstance(value, Parameter):
            raise TypeError(
                f"{what}: expected Parameter objects (or a mapping name -> array), got {type(value).__name__}"
            )
        _add_new(out, _own(value, flag))


def _add_new(out: dict[str, Parameter], param: Parameter) -> None:
    if param.name in out:
        raise DuplicateNameError(f"duplicate parameter name {param.name!r}")
    out[param.name] = param


#: optimizer groups and property names a repr shows (an untrusted checkpoint may hold 100,000)
_REPR_ITEMS = 10


class CheckpointState:
    """Parameters, optimizer state and properties of an ONNX Runtime training checkpoint.

    Build one from scratch::

        state = CheckpointState({"w": np.zeros((4, 8), np.float32)}, frozen={"b": np.zeros(3, np.float32)},
                                properties={"epoch": 3},
                                optimizer={"group0": OptimizerGroup(step=3, initial_learning_rate=1e-3)})

    or load one with ``ortckpt.load(path)`` (zero-copy, memory-mapped) and save it with
    ``ortckpt.save(state, path)`` / ``state.save(path)``.
    """

    __slots__ = (
        "_has_external_data",
        "_is_nominal",
        "_optimizer",
        "_params",
        "_properties",
        "_source",
        "_version",
    )

    def __init__(
        self,
        parameters: ParametersInput | None = None,
        *,
        frozen: ParametersInput | None = None,
        properties: PropertyInput | None = None,
        optimizer: Mapping[str, OptimizerGroup] | None = None,
    ) -> None:
        params: dict[str, Parameter] = {}
        _collect(parameters, False, params)
        _collect(frozen, True, params)
        self._params = ParameterStore(params)
        self._properties = PropertyBag(properties)
        self._optimizer: OptimizerGroups | None = None if optimizer is None else OptimizerGroups(optimizer)
        self._version = FORMAT_VERSION
        self._is_nominal = False
        self._has_external_data = False
        self._source: str | None = None

    @classmethod
    def _from_loaded(
        cls,
        *,
        version: int,
        is_nominal: bool,
        has_external_data: bool,
        params: ParameterStore,
        optimizer: OptimizerGroups | None,
        properties: PropertyBag,
        source: str,
    ) -> CheckpointState:
        self = cls.__new__(cls)
        self._params = params
        self._properties = properties
        self._optimizer = optimizer
        self._version = version
        self._is_nominal = is_nominal
        self._has_external_data = has_external_data
        self._source = source
        return self

    @classmethod
    def _from_index(cls, index: _native.Index) -> CheckpointState:
        """A state over the core's verified index (the tensors stay in its buffers until used)."""
        return cls._from_loaded(
            version=index.version,
            is_nominal=index.is_nominal,
            has_external_data=index.has_external_data,
            params=_index.parameters(index),
            optimizer=_index.optimizer_groups(index),
            properties=_index.properties(index),
            source=index.source,
        )

    # -- contents -------------------------------------------------------------------------------

    @property
    def version(self) -> int:
        """Format version of the loaded file (2 for states built in memory, and for every file written)."""
        return self._version

    @property
    def is_nominal(self) -> bool:
        """True for nominal checkpoints: parameters have names and data types but no shapes or values."""
        return self._is_nominal

    @property
    def has_external_data(self) -> bool:
        """True when the loaded file kept tensor bytes in an external data file (``<path>.data``)."""
        return self._has_external_data

    @property
    def source(self) -> str | None:
        """The path (or ``"<bytes>"``) this state was loaded from; None for states built in memory."""
        return self._source

    @property
    def parameters(self) -> ParameterMap:
        """All parameters (trainable and frozen): a mutable mapping name -> ``Parameter``."""
        return ParameterMap(self._params)

    @property
    def trainable_parameters(self) -> ParameterView:
        return ParameterView(self._params, True)

    @property
    def frozen_parameters(self) -> ParameterView:
        return ParameterView(self._params, False)

    def to_numpy(self) -> dict[str, NDArray[Any]]:
        """Every parameter's values (trainable and frozen), name -> read-only array, sorted by name.

        One pass for a loaded checkpoint: the files are checked once and no ``Parameter`` object is
        made, so it is much faster than reading ``parameters[name].data`` one by one when there
        are many tensors. The arrays are the same zero-copy views ``.data`` gives: of the mapping
        for ``load(path)``, of private memory for ``load(path, mmap=False)`` (the bulk read:
        ``ortckpt.load(path, mmap=False).to_numpy()`` reads each file once, then makes views), so
        nothing another program does to the files can change them. ``np.array(a)`` gives a
        writable copy. Optimizer state is not included (see ``optimizer``). Raises
        ``CheckpointError`` for a nominal checkpoint, whose parameters have no values.
        """
        return self._params.arrays()

    @property
    def optimizer(self) -> OptimizerGroups | None:
        """Optimizer groups by name, or None when the checkpoint holds no optimizer state."""
        return self._optimizer

    @optimizer.setter
    def optimizer(self, value: Mapping[str, OptimizerGroup] | None) -> None:
        self._optimizer = None if value is None else OptimizerGroups(value)

    @property
    def properties(self) -> PropertyBag:
        return self._properties

    @properties.setter
    def properties(self, value: PropertyInput) -> None:
        self._properties = PropertyBag(value)

    # -- saving ---------------------------------------------------------------------------------

    def save(self, path: StrPath, *, include_optimizer_state: bool = True) -> None:
        """Write the checkpoint to ``path`` atomically (see ``ortckpt.save``)."""
        CheckpointState.save_checkpoint(self, path, include_optimizer_state=include_optimizer_state)

    def to_bytes(self, *, include_optimizer_state: bool = True) -> bytes:
        """The checkpoint file content (see ``ortckpt.serialize``)."""
        return _persist.serialize_state(
            self, include_optimizer_state=include_optimizer_state, format_version=2
        )

    # -- ORT compatibility (onnxruntime.training.api.CheckpointState) ---------------------------

    @classmethod
    def load_checkpoint(cls, checkpoint_uri: StrPath) -> CheckpointState:
        """Load a checkpoint file (same as ``ortckpt.load``)."""
        return cls._from_index(_persist.open_index(checkpoint_uri, mmap=True))

    @staticmethod
    def save_checkpoint(
        state: CheckpointState, checkpoint_uri: StrPath, include_optimizer_state: bool = False
    ) -> None:
        """Save ``state`` like ORT does: without optimizer state unless asked."""
        if not isinstance(state, CheckpointState):
            raise TypeError(f"expected a CheckpointState, got {type(state).__name__}")
        _persist.save_state(
            state,
            checkpoint_uri,
            include_optimizer_state=include_optimizer_state,
            external_data_threshold=None,
            external_momentums=False,
            format_version=2,
        )

    # -- display --------------------------------------------------------------------------------

    def _repr_html_(self) -> str:
        """A compact HTML table for notebooks (see ``ortckpt._html``)."""
        return state_html(self)

    def __repr__(self) -> str:
        trainable = sum(1 for n in self._params if self._params.is_trainable(n))
        frozen = len(self._params) - trainable
        parts = [f"version={self._version}"]
        if self._is_nominal:
            parts.append("nominal")
        if self._has_external_data:
            parts.append("external data")
        nbytes = sum(p.nbytes for p in self._params.values())
        parts.append(f"{trainable} trainable + {frozen} frozen parameters ({nbytes} bytes)")
        dtypes = sorted({_dtypes.type_name(p.data_type) for p in self._params.values()})
        if dtypes:
            parts.append("dtypes " + "/".join(dtypes))
        if self._optimizer is not None:
            items = list(self._optimizer.items())
            groups = [f"{name!r} step {g.step}" for name, g in items[:_REPR_ITEMS]]
            groups += [f"… {len(items) - _REPR_ITEMS} more"] if len(items) > _REPR_ITEMS else []
            parts.append(f"optimizer [{', '.join(groups)}]")
        if self._properties:
            names = list(self._properties)
            more = f", … {len(names) - _REPR_ITEMS} more" if len(names) > _REPR_ITEMS else ""
            parts.append(f"properties {names[:_REPR_ITEMS]!r}"[:-1] + f"{more}]")
        if self._source is not None:
            parts.append(f"from {self._source!r}")
        return f"<CheckpointState {', '.join(parts)}>"
