"""Other formats, both ways: safetensors, npz, state dicts and torch (``conversions``), ONNX models
and TensorProtos (``onnx_io``), with the flat-file layout and the ONNX readers and writers they share.

Readers of untrusted bytes are the core's (docs/architecture.md, "One decoder per format"); this
package holds the layouts, names and the writers a well-kept library does (``onnx``, numpy,
``safetensors``). Nothing is imported here, so that a module of the package costs only its own
imports; the public functions are ``ortckpt``'s (``ortckpt.convert``, ``ortckpt.to_safetensors``...).
"""
