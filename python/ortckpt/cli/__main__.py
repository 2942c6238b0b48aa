"""``python -m ortckpt.cli`` runs the command-line tool, as ``python -m ortckpt`` does."""

import sys

from . import main

sys.exit(main())
