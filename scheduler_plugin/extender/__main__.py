import sys

from scheduler_plugin.extender.main import main

sys.exit(main(sys.argv[1:]))
