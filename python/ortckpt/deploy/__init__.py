"""Checkpoints to what devices run: inference models (``_export``), ORT adapter files
(``adapters``) and flat parameter buffers (``_buffers``).

Nothing is imported here; the public functions are ``ortckpt``'s (``ortckpt.export_for_inference``,
``ortckpt.to_adapter``, ``ortckpt.parameters_to_buffer``...).
"""
