"""[Yin] Table 1 analogue. Same as `speculab repro yin-table1`; the logic lives in speculab.repro.

Any pair: `python papers_repro/yin_table1.py --draft PATH_OR_NAME --target PATH_OR_NAME`.
"""

import sys

from speculab.cli import main

if __name__ == "__main__":
    sys.exit(main(["repro", "yin-table1", *sys.argv[1:]]))
