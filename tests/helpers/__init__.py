"""Code shared by the test modules (never tests themselves).

* ``paths``: the repository, tests/data and the ORT-written corpus (``tests/data/corpus``).
* ``compare``: bit-exact comparison of arrays and states.
* ``samples``: arrays of every dtype and a sample state built from them.
* ``raw_flatbuffer``: the hand-driven flatbuffer builder for crafted (and malformed) checkpoints.
* ``checks``: our-exception-only checks (``expect_error``, ``touch_state``) for malformed input.
* ``onnx_protos``: TensorProtos and a small model, for the ONNX tests (needs onnx).
* ``dask_cluster``: a loopback Dask client (needs distributed).
* ``ort``: the ORT side venvs, the oracle driver and comparisons with what ORT saw.
"""
