"""``ortckpt convert`` and ``ortckpt strip-values``: other formats, and nominal checkpoints."""

from __future__ import annotations

import argparse
import os
from typing import TextIO

# (the conversion modules are imported by the commands, so the other commands start faster)


def run_convert(args: argparse.Namespace, out: TextIO) -> int:
    from ..conversions import convert, format_of

    src, dest = os.fsdecode(args.input), os.fsdecode(args.output)
    state = convert(
        src,
        dest,
        include_optimizer_state=args.include_optimizer_state,
        trainable=args.trainable,
        format_version=args.format_version,
        progress=True,  # a bar on a terminal only
    )
    params = len(state.parameters)
    print(
        f"wrote {dest} ({format_of(dest)}): {params} parameter{'' if params == 1 else 's'} "
        f"from {src} ({format_of(src)})",
        file=out,
    )
    return 0


def run_strip_values(args: argparse.Namespace, out: TextIO) -> int:
    from .._remote import local_output
    from ..conversions import to_nominal
    from ..io import save

    src, dest = os.fsdecode(args.path), os.fsdecode(args.out)
    nominal = to_nominal(src, keep_properties=not args.drop_properties)
    with local_output(dest) as path:
        save(nominal, path)
    print(f"wrote {dest}: nominal checkpoint of {len(nominal.parameters)} parameters (no values)", file=out)
    return 0
