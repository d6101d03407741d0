"""`python -m smlaunch ...` is `sm-launch ...`."""

import sys

from smlaunch.launcher.cli import main

sys.exit(main())
