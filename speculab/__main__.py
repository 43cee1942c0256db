"""``python -m speculab``: the ``speculab`` command (:mod:`speculab.cli`), for an environment whose scripts are not
on the ``PATH``."""

import sys

from speculab.cli import main

sys.exit(main())
