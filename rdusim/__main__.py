"""`python -m rdusim` is the `rdusim` command."""

from rdusim.cli import main

raise SystemExit(main())
