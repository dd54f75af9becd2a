import sys

from common.cli import main

sys.exit(main(["scheduler", *sys.argv[1:]]))
