"""``python -m hookmagic``: the ``hookmagic`` command (``hookmagic.cli``) for an environment
whose scripts folder is not on PATH."""
from hookmagic.cli import main

raise SystemExit(main())
