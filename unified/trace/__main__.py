"""``python -m unified.trace``: the analysis notebooks' figures and numbers without Jupyter
(:mod:`unified.trace.report`)."""

import sys

from unified.trace.report import main

sys.exit(main())
