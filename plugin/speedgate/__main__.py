"""`python -m speedgate ...`: command-line tools (compare)."""

from __future__ import annotations

import sys

from .compare import main

sys.exit(main())
