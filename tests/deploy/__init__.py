"""Tests of ortckpt.deploy: tests/ mirrors the package (python/ortckpt/deploy/)."""
