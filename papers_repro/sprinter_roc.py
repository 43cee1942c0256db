"""[SPR] App. A.10 analogue: the SPRINTER verifier trained on a real pair. Same as `speculab repro sprinter-roc`.

Any pair: `python papers_repro/sprinter_roc.py --draft PATH_OR_NAME --target PATH_OR_NAME`.
"""

import sys

from speculab.cli import main

if __name__ == "__main__":
    sys.exit(main(["repro", "sprinter-roc", *sys.argv[1:]]))
