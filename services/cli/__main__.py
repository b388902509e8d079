"""`python -m services.cli`: the same as the `llmbus` command."""

import sys

from . import main

sys.exit(main())
