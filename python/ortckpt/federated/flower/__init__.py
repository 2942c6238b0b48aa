"""ONNX Runtime devices in a Flower federation (``pip install 'ortckpt[flower]'``).

* checkpoints <-> Flower's ``ArrayRecord`` (keys: ORT parameter names) and legacy ``Parameters``
  / ndarrays (ORT's parameter order): ``to_arrayrecord``, ``from_arrayrecord``, ``to_ndarrays``,
  ``from_ndarrays``, ``to_parameters``, ``from_parameters``, ``parameter_order``;
* device properties <-> ``MetricRecord`` / ``ConfigRecord`` (the sample count under FedAvg's
  ``weighted_by_key``): ``to_metricrecord``, ``to_configrecord``, ``properties_from_records``;
* a whole checkpoint's bytes, or a flat parameter buffer (ORT's ``get_contiguous_parameters``), in
  an ``ArrayRecord``: ``checkpoint_record``, ``checkpoint_bytes``, ``buffer_record``, ``buffer_values``;
* ``OrtFedAvg``: Flower's FedAvg (Message API) that validates every device reply with
  ``ortckpt.average``, drops and reports bad ones, and sends devices checkpoints;
* ``OrtFedOpt``: ``OrtFedAvg`` with a server optimizer (FedAvgM, FedAdagrad, FedAdam, FedYogi),
  adaptive clipping and privacy accounting whose state rides in the global checkpoint.

See docs/flower.md. ``import ortckpt`` does not import this module (nor flwr).
"""

from ._records import (
    BUFFER_KEY,
    CHECKPOINT_KEY,
    buffer_record,
    buffer_values,
    checkpoint_bytes,
    checkpoint_record,
    from_arrayrecord,
    from_ndarrays,
    from_parameters,
    parameter_order,
    properties_from_records,
    to_arrayrecord,
    to_configrecord,
    to_metricrecord,
    to_ndarrays,
    to_parameters,
)
from ._server import OrtFedOpt
from ._strategy import PAYLOAD_CONFIG_KEY, PAYLOADS, OrtFedAvg, Rejection, RoundReport

__all__ = [
    "BUFFER_KEY",
    "CHECKPOINT_KEY",
    "PAYLOADS",
    "PAYLOAD_CONFIG_KEY",
    "OrtFedAvg",
    "OrtFedOpt",
    "Rejection",
    "RoundReport",
    "buffer_record",
    "buffer_values",
    "checkpoint_bytes",
    "checkpoint_record",
    "from_arrayrecord",
    "from_ndarrays",
    "from_parameters",
    "parameter_order",
    "properties_from_records",
    "to_arrayrecord",
    "to_configrecord",
    "to_metricrecord",
    "to_ndarrays",
    "to_parameters",
]
