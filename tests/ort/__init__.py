"""Tests against the real ONNX Runtime (the oracle), which runs in side virtualenvs."""
