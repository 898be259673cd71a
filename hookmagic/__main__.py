"""``python -m hookmagic``: the ``hookmagic`` command (``hookmagic.cli``) for an environment
whose scripts folder is not on PATH."""
import sys

from hookmagic.cli import main

sys.exit(main())
