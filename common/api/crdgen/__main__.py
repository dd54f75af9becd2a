import sys

from common.api.crdgen.cli import main

sys.exit(main())
