"""The lazy ``onnx`` import: onnx is optional, so ``import ortckpt`` must work without it."""

from __future__ import annotations


def require_onnx() -> None:
    """Raise an ``ImportError`` that says how to install onnx when it is missing."""
    try:
        import onnx  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "this function needs the 'onnx' package: pip install onnx (or ortckpt[onnx])"
        ) from exc
