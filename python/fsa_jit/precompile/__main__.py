"""python -m fsa_jit.precompile: the fsa-precompile command."""

import sys

from ..cli import precompile_main

sys.exit(precompile_main())
