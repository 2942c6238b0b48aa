"""The server side of federated learning: one round engine (``aggregate``, ``_round``) over uploads
read once (``_uploads``), local or on a Dask cluster (``_dask``), with the robust methods, the server
optimizers and privacy whose state rides in the checkpoint (``_server_opt``, ``_privacy``,
``_server_state``, ``_server_round``), and the Flower bridge (``flower``). See docs/federated.md.

Nothing is imported here; the public names are ``ortckpt``'s (``ortckpt.average``, ``ortckpt.Round``,
``ortckpt.FedAdam``...) and ``ortckpt.flower``'s.
"""
