"""``python -m pygrid``: the ``pygrid`` command line."""
import sys

from .cli import main

sys.exit(main(sys.argv[1:]))
