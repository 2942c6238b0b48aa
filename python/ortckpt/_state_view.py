"""What the modules below ``state`` read of a ``CheckpointState``: its summary for notebooks
(``_html``), its save spec (``_spec``) and its saving (``_persist``). ``state`` imports those
modules; they name this protocol instead of the class, so no import runs back up to ``state``.
``CheckpointState`` has every member (mypy checks it wherever a state is passed)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ._containers import OptimizerGroups, ParameterMap
    from ._properties import PropertyBag


class StateView(Protocol):
    """The read-only face of a ``CheckpointState``."""

    @property
    def version(self) -> int: ...

    @property
    def is_nominal(self) -> bool: ...

    @property
    def has_external_data(self) -> bool: ...

    @property
    def source(self) -> str | None: ...

    @property
    def parameters(self) -> ParameterMap: ...

    @property
    def optimizer(self) -> OptimizerGroups | None: ...

    @property
    def properties(self) -> PropertyBag: ...
