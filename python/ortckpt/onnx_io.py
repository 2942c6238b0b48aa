"""``ortckpt.onnx_io``: checkpoints from ONNX TensorProtos and models, and back.

The code lives in :mod:`ortckpt.formats.onnx_io`; this module keeps the import path users have written
since before the package was grouped by concern (docs/architecture.md).
"""

from .formats.onnx_io import *  # noqa: F403  (the public names: that module's __all__)
from .formats.onnx_io import __all__ as __all__
