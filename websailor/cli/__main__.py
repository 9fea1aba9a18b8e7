"""``python -m websailor.cli`` (as ``accelerate launch -m websailor.cli`` runs it)."""

from websailor.cli.main import main

main()
