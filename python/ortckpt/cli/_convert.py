"""``ortckpt convert``: rewrite a checkpoint (file, or ORT 1.15 folder) in the format version a
given ORT release reads."""

from __future__ import annotations

import argparse
import os
from typing import TextIO

from ..io import load, save


def run_convert(args: argparse.Namespace, out: TextIO) -> int:
    src = os.fsdecode(args.path)
    dest = os.fsdecode(args.out)
    state = load(src)
    save(state, dest, include_optimizer_state=not args.no_optimizer, format_version=args.format_version)
    print(f"{src} -> {dest}: format version {args.format_version}", file=out)
    return 0
