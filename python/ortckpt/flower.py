"""``ortckpt.flower``: the Flower bridge (``pip install 'ortckpt[flower]'``, docs/flower.md).

The code lives in :mod:`ortckpt.federated.flower`; this module keeps the import path users have written
since before the package was grouped by concern (docs/architecture.md).
"""

from .federated.flower import *  # noqa: F403  (the public names: that module's __all__)
from .federated.flower import __all__ as __all__
