"""`python -m rdusim.cli` is the `rdusim` command, as `python -m rdusim` is."""

from rdusim.cli import main

raise SystemExit(main())
