"""A Flower App whose clients are ONNX Runtime on-device training devices (see docs/flower.md)."""
