"""``python -m speculab``: the ``speculab`` command (:mod:`speculab.cli`), for an environment whose scripts are not
on the ``PATH``."""

import sys

from speculab.cli import main

if __name__ == "__main__":  # run as ``python -m speculab``, not imported
    sys.exit(main())
