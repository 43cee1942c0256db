"""[FSD] Table 2 / App. E analogue on real models. Same as `speculab repro fsd-tradeoff`; the logic lives in
speculab.repro.

Any pair: `python papers_repro/fsd_tradeoff.py --draft PATH_OR_NAME --target PATH_OR_NAME`.
"""

import sys

from speculab.cli import main

if __name__ == "__main__":
    sys.exit(main(["repro", "fsd-tradeoff", *sys.argv[1:]]))
