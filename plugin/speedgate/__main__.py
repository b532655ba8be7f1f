"""`python -m speedgate ...`: command-line tools (compare, history, evidence)."""

from __future__ import annotations

import sys

from .compare import main

if sys.argv[1:2] == ["history"]:
    from .history.cli import main as history_main

    sys.exit(history_main(sys.argv[2:]))
if sys.argv[1:2] == ["evidence"]:
    from .evidence_cli import main as evidence_main

    sys.exit(evidence_main(sys.argv[2:]))
sys.exit(main())
