"""``python -m refattn`` is the ``refattn`` command."""

import sys

from .cli import main

sys.exit(main())
