"""Code shared by the test modules (never tests themselves).

* ``paths``: the repository, tests/data and the ORT-written corpus (``../shared/corpus``).
* ``compare``: bit-exact comparison of arrays and states.
* ``samples``: arrays of every dtype and a sample state built from them.
* ``raw_flatbuffer``: the hand-driven flatbuffer builder for crafted (and malformed) checkpoints.
* ``checks``: our-exception-only checks (``expect_error``, ``touch_state``) for malformed input.
* ``ort``: the ORT side venv, the oracle driver and comparisons with what ORT saw.
"""
