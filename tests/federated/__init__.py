"""Tests of ortckpt.federated: tests/ mirrors the package (python/ortckpt/federated/)."""
