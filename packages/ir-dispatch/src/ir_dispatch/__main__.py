"""``python -m ir_dispatch``: which implementation each op would use here, and why."""

import sys

from .report import main

sys.exit(main())
