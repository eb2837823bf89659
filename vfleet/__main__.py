import sys

from vfleet.cli import main

sys.exit(main())
