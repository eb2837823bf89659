"""`python -m lab`: the lab's command line (lab.cli)."""

import sys

from lab.cli import main

sys.exit(main())
