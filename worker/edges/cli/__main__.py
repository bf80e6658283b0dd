"""``python -m worker.edges.cli``: the ``dres`` command, as the tests and the Makefile start it."""

import sys

from worker.edges.cli.main import main

sys.exit(main())
