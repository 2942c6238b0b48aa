"""Tests of ortckpt.formats: tests/ mirrors the package (python/ortckpt/formats/)."""
