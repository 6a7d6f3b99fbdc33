"""``python -m tools.microbench {decode,first-batch,index,parse,planner,validate} ...`` (see the package docstring)."""

from tools.microbench import main

raise SystemExit(main())
