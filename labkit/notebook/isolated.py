"""``python -m labkit.notebook.isolated SPEC``: one headless run (``execution.main``) in a process
of its own, which ``labkit check`` can kill whole at its notebook timeout."""

import sys

from labkit.notebook.execution import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
