"""``ortckpt.adapters``: ORT adapter files from checkpoints, and back.

The code lives in :mod:`ortckpt.deploy.adapters`; this module keeps the import path users have written
since before the package was grouped by concern (docs/architecture.md).
"""

from .deploy.adapters import *  # noqa: F403  (the public names: that module's __all__)
from .deploy.adapters import __all__ as __all__
