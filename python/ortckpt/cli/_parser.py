"""The argument parser of ``ortckpt``: every command, its options, help text and examples.

Each command is registered with ``_command(..., run="module:function")``: the function runs the
command (``(args, out) -> exit status``) and its module is imported only when that command runs,
so ``ortckpt --help`` and shell completion stay fast. ``add_output_options`` (``_output``) gives a
command the shared ``--json`` / ``--dry-run`` options.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from ..io import DEFAULT_EXTERNAL_DATA_THRESHOLD
from ._output import add_output_options


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that knows its commands' parsers (``commands``), so that a command's
    own mistakes can be reported with that command's usage."""

    commands: dict[str, argparse.ArgumentParser]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = {}


def _version() -> str:
    from .. import __version__

    return __version__


_FORMATTER = argparse.RawDescriptionHelpFormatter


def _command(
    top: Parser, commands: Any, name: str, summary: str, description: str, examples: str, *, run: str
) -> argparse.ArgumentParser:
    """Register command ``name``; ``run`` is ``"module:function"`` (module relative to this package)."""
    parser: argparse.ArgumentParser = commands.add_parser(
        name,
        help=summary,
        description=description,
        epilog="examples:\n" + examples,
        formatter_class=_FORMATTER,
    )
    parser.set_defaults(run=run)
    top.commands[name] = parser
    return parser


def build_parser() -> Parser:
    parser = Parser(
        prog="ortckpt",
        description="Inspect, compare, edit and convert ONNX Runtime on-device training checkpoints.",
        epilog=(
            "exit status: 0 success (diff: identical), 1 diff: different, 2 error\n"
            "'ortckpt COMMAND --help' shows the options and examples of a command."
        ),
        formatter_class=_FORMATTER,
    )
    parser.add_argument("--version", action="version", version=f"ortckpt {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=argparse.ArgumentParser)

    inspect = _command(
        parser,
        commands,
        "inspect",
        "print the content of a checkpoint",
        "Print the parameters, optimizer groups and properties of a checkpoint.",
        "  ortckpt inspect model.ckpt\n"
        "  ortckpt inspect model.ckpt --values 5\n"
        "  ortckpt inspect model.ckpt --json | jq '.properties'\n",
        run="_inspect:run_inspect",
    )
    inspect.add_argument("path", metavar="PATH", help="checkpoint file (or ORT adapter, *.onnx_adapter)")
    add_output_options(inspect, writes=False)
    inspect.add_argument(
        "--values", type=_non_negative, default=0, metavar="N", help="also print the first N values"
    )

    diff = _command(
        parser,
        commands,
        "diff",
        "compare two checkpoints (exit 0 identical, 1 different, 2 error)",
        "Compare two checkpoints: parameters only in A or only in B; trainable flag, dtype and\n"
        "shape changes; values (count of differing elements and the largest absolute\n"
        "difference); optimizer groups (step, initial learning rate, momentums); properties.\n"
        "Values are compared bit for bit unless --rtol/--atol is given; NaN equals NaN.\n"
        "Both files are memory-mapped and compared one tensor at a time.\n"
        "Exit status: 0 identical (nothing is printed), 1 different, 2 error.",
        "  ortckpt diff before.ckpt after.ckpt\n"
        "  ortckpt diff a.ckpt b.ckpt --atol 1e-6 --rtol 1e-5\n"
        "  ortckpt diff a.ckpt b.ckpt --json | jq '.parameters.changed[].name'\n"
        "  ortckpt diff -q a.ckpt b.ckpt || echo different\n",
        run="_diff:run_diff",
    )
    diff.add_argument("a", metavar="A", help="first checkpoint")
    diff.add_argument("b", metavar="B", help="second checkpoint")
    add_output_options(diff, writes=False)
    diff.add_argument(
        "--rtol",
        type=_tolerance,
        metavar="R",
        help="relative tolerance: values a, b are equal when |a - b| <= atol + rtol * |b| (default 0)",
    )
    diff.add_argument("--atol", type=_tolerance, metavar="A", help="absolute tolerance (default 0)")
    diff.add_argument(
        "-q", "--quiet", action="store_true", help="print nothing; stop at the first difference"
    )

    from_onnx = _command(
        parser,
        commands,
        "from-onnx",
        "write a checkpoint from the initializers of an ONNX model",
        "Write a checkpoint from the initializers of an ONNX model's main graph (needs the\n"
        "'onnx' package), like ORT's generate_artifacts. Float initializers are trainable\n"
        "unless --trainable names the trainable ones; the others are frozen. External data of\n"
        "the model is memory-mapped, not read into memory.",
        "  ortckpt from-onnx model.onnx model.ckpt\n"
        "  ortckpt from-onnx model.onnx model.ckpt --trainable fc1.weight fc1.bias\n"
        "  ortckpt from-onnx --trainable fc1.weight fc1.bias model.onnx model.ckpt\n"
        "  ortckpt from-onnx model.onnx nominal.ckpt --nominal\n",
        run="_onnx:run_from_onnx",
    )
    # MODEL and OUT are optional to argparse so that "--trainable a b MODEL OUT" parses: the
    # command takes what is missing from the end of the --trainable names (_onnx.positionals).
    from_onnx.add_argument("model", metavar="MODEL", nargs="?", help="ONNX model file")
    from_onnx.add_argument("out", metavar="OUT", nargs="?", help="checkpoint to write")
    from_onnx.add_argument(
        "--trainable",
        nargs="+",
        action="extend",
        metavar="NAME",
        help="initializers to make trainable (repeatable; default: every float initializer); "
        "may come before MODEL OUT",
    )
    from_onnx.add_argument(
        "--nominal", action="store_true", help="write names and data types only (a nominal checkpoint)"
    )
    from_onnx.add_argument(
        "--external-data-threshold",
        type=_non_negative,
        default=DEFAULT_EXTERNAL_DATA_THRESHOLD,
        metavar="BYTES",
        help="move tensor data to OUT.data when it exceeds BYTES in total (default: 1800 MiB, as ORT)",
    )
    add_output_options(from_onnx, writes=True)

    to_onnx = _command(
        parser,
        commands,
        "to-onnx",
        "write an ONNX model with the values of a checkpoint",
        "Write a copy of MODEL whose initializers take the values of the checkpoint's parameters\n"
        "of the same name (like ORT's LoadCheckpointToModel; needs the 'onnx' package).\n"
        "Initializers the checkpoint lacks are kept. A model of 2 GiB or more is saved with its\n"
        "tensor data in OUT.data next to OUT.",
        "  ortckpt to-onnx trained.ckpt model.onnx trained.onnx\n"
        "  ortckpt to-onnx trained.ckpt model.onnx trained.onnx --dry-run --json\n",
        run="_onnx:run_to_onnx",
    )
    to_onnx.add_argument("ckpt", metavar="CKPT", help="checkpoint file")
    to_onnx.add_argument("model", metavar="MODEL", help="ONNX model file")
    to_onnx.add_argument("out", metavar="OUT", help="ONNX model to write")
    add_output_options(to_onnx, writes=True)

    set_property = _command(
        parser,
        commands,
        "set-property",
        "set or delete properties of a checkpoint, in place",
        "Set (NAME=VALUE) or delete (--delete NAME) properties, rewriting the checkpoint in\n"
        "place atomically; parameters and optimizer state are kept bit for bit. A VALUE is\n"
        "an int if it reads as one, else a float (stored as float32) if it reads as one,\n"
        "else a str; --type forces the type of every VALUE. A number with leading zeros\n"
        "(0042) is refused unless --type says whether to keep the text or the number.",
        "  ortckpt set-property model.ckpt epoch=4 best_loss=0.125 note='fine-tuned on v2'\n"
        "  ortckpt set-property model.ckpt run_id=0042 --type str\n"
        "  ortckpt set-property model.ckpt --delete note\n"
        "  ortckpt set-property model.ckpt epoch=5 --dry-run\n",
        run="_edit:run_set_property",
    )
    set_property.add_argument("path", metavar="CKPT", help="checkpoint file (rewritten in place)")
    set_property.add_argument(
        "assignments",
        nargs="*",
        metavar="NAME=VALUE",
        help="property to set (its value split at the first '=')",
    )
    set_property.add_argument(
        "--type", choices=("int", "float", "str"), help="type of every VALUE (default: detected)"
    )
    set_property.add_argument(
        "--delete", action="append", default=[], metavar="NAME", help="property to delete (repeatable)"
    )
    add_output_options(set_property, writes=True)

    strip = _command(
        parser,
        commands,
        "strip-optimizer",
        "remove the optimizer state of a checkpoint",
        "Save the checkpoint without its optimizer state (as ORT's save_checkpoint with\n"
        "include_optimizer_state=False): parameters and properties are kept bit for bit. Writes\n"
        "OUT, or rewrites CKPT in place atomically when OUT is omitted.",
        "  ortckpt strip-optimizer trained.ckpt deploy.ckpt\n"
        "  ortckpt strip-optimizer trained.ckpt\n"
        "  ortckpt strip-optimizer trained.ckpt --dry-run\n",
        run="_edit:run_strip_optimizer",
    )
    strip.add_argument("path", metavar="CKPT", help="checkpoint file")
    strip.add_argument("out", metavar="OUT", nargs="?", help="checkpoint to write (default: CKPT, in place)")
    add_output_options(strip, writes=True)
    _add_file_commands(parser, commands)
    _add_server_commands(parser, commands)
    _add_deploy_commands(parser, commands)
    _add_buffer_commands(parser, commands)
    return parser


def _add_file_commands(parser: Parser, commands: Any) -> None:
    """recover (docs/format.md §11)."""
    recover = _command(
        parser,
        commands,
        "recover",
        "settle an interrupted save of a checkpoint",
        "Restore one complete state of a checkpoint after a save was interrupted (crash, power\n"
        "loss, kill -9): complete the save when all its new files are there, else restore the\n"
        "checkpoint from before it. Removes every temporary, backup and journal file of\n"
        "interrupted saves of CKPT. Needed when loading raises InterruptedSaveError; the next\n"
        "save of CKPT also does it. Waits for a save of CKPT that is still running.",
        "  ortckpt recover model.ckpt\n",
        run="_recover:run_recover",
    )
    recover.add_argument("path", metavar="CKPT", help="checkpoint file")
    # (no --dry-run: settling an interrupted save is the one thing the command is for)
    add_output_options(recover, writes=False)


def _add_server_commands(parser: Parser, commands: Any) -> None:
    """convert, strip-values, average (docs/federated.md)."""
    convert = _command(
        parser,
        commands,
        "convert",
        "convert between checkpoints (any ORT release), safetensors and npz files",
        "Convert IN to OUT, each format chosen by extension: .safetensors, .npz, anything else\n"
        "an ORT checkpoint (IN may also be the checkpoint folder ORT 1.15 wrote). Trainable flags,\n"
        "properties and optimizer state (unless --drop-optimizer) travel in the files'\n"
        "metadata, so a round trip is bit-exact. Tensors are memory-mapped and written one at a\n"
        "time. IN and OUT may be fsspec URLs (s3://...). A checkpoint OUT is written in format\n"
        "version 2 (ORT 1.18 and later) or, with --format-version 1, for ORT 1.16-1.17.",
        "  ortckpt convert trained.ckpt trained.safetensors\n"
        "  ortckpt convert trained.ckpt weights.npz --drop-optimizer\n"
        "  ortckpt convert model.safetensors model.ckpt --trainable fc1.weight fc1.bias\n"
        "  ortckpt convert checkpoint/ model.ckpt                            # ORT 1.15 folder\n"
        "  ortckpt convert model.ckpt old.ckpt --format-version 1            # for ORT 1.16-1.17\n",
        run="_convert:run_convert",
    )
    convert.add_argument(
        "input", metavar="IN", help="checkpoint (file, or ORT 1.15 folder), .safetensors or .npz file"
    )
    convert.add_argument("output", metavar="OUT", help="file to write (format by extension)")
    optimizer = convert.add_mutually_exclusive_group()
    optimizer.add_argument(
        "--include-optimizer-state",
        action="store_const",
        const=True,
        dest="include_optimizer_state",
        help="convert the optimizer state (the default when IN has one)",
    )
    optimizer.add_argument(
        "--drop-optimizer",
        action="store_const",
        const=False,
        dest="include_optimizer_state",
        help="leave IN's optimizer state out of OUT (without it a conversion never drops it)",
    )
    convert.add_argument(
        "--trainable",
        nargs="+",
        action="extend",
        metavar="NAME",
        help="parameters to make trainable, the others frozen (repeatable; after IN OUT; default: "
        "as recorded, else every float)",
    )
    convert.add_argument(
        "--format-version",
        type=int,
        choices=(1, 2),
        default=2,
        help="for a checkpoint OUT: 1 for ORT 1.16-1.17, 2 for ORT 1.18 and later (default)",
    )
    add_output_options(convert, writes=True)

    strip_values = _command(
        parser,
        commands,
        "strip-values",
        "write the nominal checkpoint of a checkpoint (names and types, no values)",
        "Write a nominal checkpoint: every parameter's name, trainable flag and data type, without\n"
        "values (as generate_artifacts(..., nominal_checkpoint=True) writes), to ship a model's\n"
        "structure to devices without its weights. Optimizer state is dropped.",
        "  ortckpt strip-values trained.ckpt nominal.ckpt\n",
        run="_convert:run_strip_values",
    )
    strip_values.add_argument("path", metavar="CKPT", help="checkpoint file")
    strip_values.add_argument("out", metavar="OUT", help="nominal checkpoint to write")
    strip_values.add_argument("--drop-properties", action="store_true", help="do not keep the properties")
    add_output_options(strip_values, writes=True)

    average = _command(
        parser,
        commands,
        "average",
        "average device checkpoints (federated averaging), rejecting bad uploads",
        "Average the trainable parameters of SRC... (FedAvg) into OUT. Every upload is checked\n"
        "against the reference (--reference, else the first upload that loads): parameter names,\n"
        "trainable flags, dtypes, shapes, finite values, size. Bad uploads are rejected and listed,\n"
        "never averaged. Frozen parameters and properties come from the reference. Sums are\n"
        "float64, one upload in memory at a time. Glob patterns in URLs are expanded. Exit 0 when\n"
        "OUT was written, 2 when the round gave no result (no upload accepted, fewer than the\n"
        "method needs, or an aggregate that overflows).",
        "  ortckpt average global.ckpt uploads/*.ckpt\n"
        "  ortckpt average global.ckpt uploads/*.ckpt --weights-property num_samples\n"
        "  ortckpt average global.ckpt s3://bucket/round7/*.ckpt --reference base.ckpt\n",
        run="_average:run_average",
    )
    average.add_argument("out", metavar="OUT", help="averaged checkpoint to write")
    average.add_argument("sources", metavar="SRC", nargs="+", help="device checkpoints (paths or URLs)")
    average.add_argument(
        "--weights-property", metavar="NAME", help="weigh each upload by its property NAME (e.g. samples)"
    )
    average.add_argument("--reference", metavar="REF", help="checkpoint every upload must match")
    average.add_argument(
        "--include-optimizer-state", action="store_true", help="also average the optimizer momentums"
    )
    average.add_argument(
        "--max-bytes",
        type=_positive,
        metavar="BYTES",
        help="reject larger uploads (default: 4x the reference's tensor bytes + 1 MiB)",
    )
    add_method_options(average)
    add_server_options(average)
    add_output_options(average, writes=False)


def _add_deploy_commands(parser: Parser, commands: Any) -> None:
    """export-adapter and export-inference (docs/deploy.md)."""
    _add_export_inference(parser, commands)
    export_adapter = _command(
        parser,
        commands,
        "export-adapter",
        "write an ORT adapter file (.onnx_adapter, ORT >= 1.20) from a checkpoint",
        "Write parameters of CKPT as an ONNX Runtime adapter file (Multi-LoRA, loaded by\n"
        "onnxruntime, onnxruntime-web and onnxruntime-genai with RunOptions.add_active_adapter).\n"
        "Every parameter by default, or those matching --parameters. ORT refuses scalar, bool and\n"
        "complex parameters in adapters, and so does this command.",
        "  ortckpt export-adapter trained.ckpt user42.onnx_adapter --parameters '*lora*'\n"
        "  ortckpt export-adapter trained.ckpt a.onnx_adapter --adapter-version 3 --model-version 1\n"
        "  ortckpt inspect user42.onnx_adapter\n",
        run="_deploy:run_export_adapter",
    )
    export_adapter.add_argument("path", metavar="CKPT", help="checkpoint file (or URL)")
    export_adapter.add_argument("out", metavar="OUT", help="adapter file to write")
    export_adapter.add_argument("--parameters", metavar="GLOB", help="only parameters whose names match GLOB")
    export_adapter.add_argument(
        "--adapter-version", type=int, metavar="N", help="int32 stored in the file (default 0)"
    )
    export_adapter.add_argument(
        "--model-version", type=int, metavar="N", help="int32 stored in the file (default 0)"
    )
    add_output_options(export_adapter, writes=True)


def _add_export_inference(parser: Parser, commands: Any) -> None:
    export = _command(
        parser,
        commands,
        "export-inference",
        "write an inference model from an eval model and a trained checkpoint",
        "Write the inference model ORT's Module.export_model_for_inferencing wrote: EVAL_MODEL\n"
        "(the eval model generate_artifacts wrote) with only the nodes the --output values need,\n"
        "the parameters of CKPT as initializers, and the inputs the loss alone used (labels)\n"
        "removed. Models over 2 GiB keep their tensors in OUT.data (ONNX external data).\n"
        "Needs the 'onnx' package.",
        "  ortckpt export-inference eval_model.onnx trained.ckpt model.onnx --output output\n"
        "  ortckpt export-inference eval_model.onnx trained.ckpt model.onnx --output logits probs\n"
        "  ortckpt export-inference eval_model.onnx trained.ckpt model.onnx --output y --dry-run --json\n",
        run="_deploy:run_export_inference",
    )
    export.add_argument("eval_model", metavar="EVAL_MODEL", help="the eval model (eval_model.onnx)")
    export.add_argument("ckpt", metavar="CKPT", help="trained checkpoint file (or URL)")
    export.add_argument("out", metavar="OUT", help="ONNX model to write")
    export.add_argument(
        "--output",
        dest="outputs",
        nargs="+",
        action="extend",
        required=True,
        metavar="NAME",
        help="an output of the inference model, in order (repeatable; not the loss)",
    )
    export.add_argument(
        "--user-input",
        dest="user_inputs",
        nargs="+",
        action="extend",
        metavar="NAME",
        help="the inputs fed data (default: those before the first parameter input)",
    )
    add_output_options(export, writes=True)


def _add_buffer_commands(parser: Parser, commands: Any) -> None:
    """to-buffer, from-buffer: ORT's flat parameter buffers (docs/federated.md)."""
    to_buffer = _command(
        parser,
        commands,
        "to-buffer",
        "write a checkpoint's parameters as ORT's flat float32 parameter buffer",
        "Write the parameters of CKPT as the flat float32 buffer ORT's\n"
        "Module.get_contiguous_parameters() returns for the same checkpoint and training model:\n"
        "the training graph's parameter inputs in graph order, each one's values in C order,\n"
        "trainable parameters only unless --all-parameters. OUT holds raw little-endian float32\n"
        "values, no header (as numpy.ndarray.tofile writes; numpy.fromfile(OUT, '<f4') reads it).\n"
        "Needs the 'onnx' package.",
        "  ortckpt to-buffer global.ckpt --training-model training_model.onnx -o params.bin\n"
        "  ortckpt to-buffer global.ckpt --training-model training_model.onnx --all-parameters -o all.bin\n",
        run="_buffers:run_to_buffer",
    )
    to_buffer.add_argument("ckpt", metavar="CKPT", help="checkpoint file")
    from_buffer = _command(
        parser,
        commands,
        "from-buffer",
        "write a checkpoint from a reference and ORT's flat float32 parameter buffer",
        "Write OUT: the --reference checkpoint with the parameters in BUF (raw little-endian\n"
        "float32, as to-buffer and Module.get_contiguous_parameters() make them) replaced, as ORT's\n"
        "Module.copy_buffer_to_parameters() does; everything else of the reference is kept. BUF\n"
        "must hold exactly the values the training model and reference need (trainable only\n"
        "unless --all-parameters); a nominal reference needs --all-parameters. Needs 'onnx'.",
        "  ortckpt from-buffer upload.bin --reference global.ckpt --training-model training_model.onnx "
        "-o device.ckpt\n"
        "  ortckpt from-buffer all.bin --reference nominal.ckpt --training-model training_model.onnx "
        "--all-parameters -o full.ckpt\n",
        run="_buffers:run_from_buffer",
    )
    from_buffer.add_argument("buffer", metavar="BUF", help="buffer file (raw little-endian float32)")
    from_buffer.add_argument(
        "--reference", required=True, metavar="CKPT", help="checkpoint whose parameters BUF holds"
    )
    for command, what in ((to_buffer, "buffer file"), (from_buffer, "checkpoint")):
        command.add_argument(
            "--training-model",
            required=True,
            metavar="MODEL",
            help="training ONNX model (training_model.onnx)",
        )
        command.add_argument(
            "--all-parameters",
            action="store_true",
            help="frozen parameters too (ORT's trainable_only=False); default: trainable only",
        )
        command.add_argument("-o", "--out", required=True, metavar="OUT", help=f"{what} to write")
        add_output_options(command, writes=True)


_METHODS = ("fedavg", "median", "trimmed_mean", "krum", "multi_krum", "bulyan")  # as ortckpt.Round


def add_method_options(command: argparse.ArgumentParser) -> None:
    """``--method`` and its parameters, and the update hygiene (docs/federated.md)."""
    command.add_argument(
        "--method", choices=_METHODS, default="fedavg", help="aggregation rule (default fedavg)"
    )
    command.add_argument("--trim", type=float, default=0.1, help="trimmed_mean: share cut at each side")
    command.add_argument(
        "--byzantine", type=int, default=0, metavar="F", help="krum/multi_krum/bulyan: attackers"
    )
    command.add_argument("--keep", type=int, metavar="M", help="multi_krum: uploads averaged (default n - F)")
    command.add_argument(
        "--relative-to", metavar="GLOBAL", help="aggregate updates against this global model"
    )
    command.add_argument("--clip-norm", type=float, metavar="C", help="clip each update's L2 norm to C")
    command.add_argument(
        "--noise-multiplier", type=float, metavar="Z", help="central DP noise (needs --clip-norm)"
    )
    command.add_argument("--seed", type=int, help="seed of the noise")
    command.add_argument(
        "--chunk-bytes",
        type=int,
        default=64 << 20,
        metavar="BYTES",
        help="streamed methods: memory per chunk",
    )


_SERVER_OPTIMIZERS = ("fedavgm", "fedadagrad", "fedadam", "fedyogi")  # as ortckpt's server optimizers


def add_server_options(command: argparse.ArgumentParser) -> None:
    """The server's state kept in the global checkpoint (docs/federated.md, "Server optimizers and
    resuming a server"). Every hyperparameter omitted is the one GLOBAL's state was made with,
    else Flower's default."""
    group = command.add_argument_group(
        "server state (needs --relative-to GLOBAL: read from GLOBAL, written into OUT)"
    )
    group.add_argument("--server-optimizer", choices=_SERVER_OPTIMIZERS, help="step by the aggregated update")
    for flag, what in (
        ("--eta", "fedadagrad/fedadam/fedyogi: server learning rate (default 0.1; fedyogi 0.01)"),
        ("--eta-l", "the devices' learning rate, recorded (default 0.1; fedyogi 0.0316)"),
        ("--beta-1", "fedadam/fedyogi: first moment decay (default 0.9)"),
        ("--beta-2", "fedadam/fedyogi: second moment decay (default 0.99)"),
        ("--tau", "adaptivity (default 0.001)"),
        ("--server-learning-rate", "fedavgm: server learning rate (default 1.0)"),
        ("--server-momentum", "fedavgm: server momentum (default 0.0)"),
        ("--initial-clipping-norm", "adaptive clipping: the first round's norm (default 0.1)"),
        ("--target-quantile", "adaptive clipping: share of updates left unclipped (default 0.5)"),
        ("--clip-norm-lr", "adaptive clipping: learning rate of the norm (default 0.2)"),
        ("--clipped-count-stddev", "adaptive clipping: noise on the count (default N / 20)"),
        ("--dp-delta", "account the privacy spent: epsilon at this delta"),
        ("--sampling-rate", "privacy: the share of devices a round samples (default 1.0)"),
    ):
        group.add_argument(flag, type=float, metavar="X", help=what)
    group.add_argument(
        "--adaptive-clipping",
        type=int,
        metavar="N",
        help="adaptive clipping with N devices sampled a round (replaces --clip-norm)",
    )
    group.add_argument("--accountant", choices=("rdp", "pld"), help="privacy accountant (default rdp)")


def _positive(text: str) -> int:
    value = _non_negative(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return value


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0: {value}")
    return value


def _tolerance(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0: {text}")
    return value
