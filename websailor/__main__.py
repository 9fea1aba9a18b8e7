"""``python -m websailor``: the ``websailor`` command."""

from websailor.cli.main import main

main()
