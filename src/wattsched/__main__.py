"""``python -m wattsched``: the same as the ``wattsched`` command."""

from .cli.main import main

main()
