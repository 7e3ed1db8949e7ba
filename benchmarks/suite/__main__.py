"""``python -m benchmarks.suite``: see benchmarks/suite/run.py."""

import sys

from .run import main

sys.exit(main())
