import sys

from common.cli import main

sys.exit(main(["manager", *sys.argv[1:]]))
