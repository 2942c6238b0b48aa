"""The lazy ``onnx`` import: onnx is optional, so ``import ortckpt`` must work without it."""

from __future__ import annotations


def require_onnx(what: str = "this function") -> None:
    """Raise an ``ImportError`` that says how to install onnx when it is missing (``what`` names
    the function or command that needs it)."""
    try:
        import onnx  # noqa: F401
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"{what} needs the 'onnx' package: pip install onnx (or pip install 'ortckpt[onnx]')"
        ) from None
