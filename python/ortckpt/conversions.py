"""``ortckpt.conversions``: conversions between checkpoints and safetensors, npz, state dicts and torch.

The code lives in :mod:`ortckpt.formats.conversions`; this module keeps the import path users have written
since before the package was grouped by concern (docs/architecture.md).
"""

from .formats.conversions import *  # noqa: F403  (the public names: that module's __all__)
from .formats.conversions import __all__ as __all__
