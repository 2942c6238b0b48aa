"""``ortckpt.aggregate``: validated aggregation of device checkpoints (``average``, ``Round``).

The code lives in :mod:`ortckpt.federated.aggregate`; this module keeps the import path users have written
since before the package was grouped by concern (docs/architecture.md).
"""

from .federated.aggregate import *  # noqa: F403  (the public names: that module's __all__)
from .federated.aggregate import __all__ as __all__
