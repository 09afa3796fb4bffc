"""``python -m refattn.exercises``: the same as ``refattn exercises``."""

import sys

from . import main

sys.exit(main())
