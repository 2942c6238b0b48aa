"""The package version, a plain constant so that ``import ortckpt`` does not import
``importlib.metadata``. It must equal the Cargo workspace version (the wheel's version, which
maturin takes from Cargo.toml); tests/test_packaging.py checks that."""

__version__ = "0.1.0"
