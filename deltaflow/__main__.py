"""``python -m deltaflow``: the command line."""

from .cli import main

raise SystemExit(main())
