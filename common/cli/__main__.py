"""`python -m common.cli`: the `loadline` command."""

import sys

from common.cli import main

sys.exit(main())
