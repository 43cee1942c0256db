"""[SDpp] Fig. 3 on real models. Same as `speculab repro specdecpp-pareto`; the logic lives in speculab.repro.

Any pair: `python papers_repro/specdecpp_pareto.py --draft PATH_OR_NAME --target PATH_OR_NAME`.
"""

import sys

from speculab.cli import main

if __name__ == "__main__":
    sys.exit(main(["repro", "specdecpp-pareto", *sys.argv[1:]]))
