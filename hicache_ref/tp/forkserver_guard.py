"""Imported first by the TP launcher's forkserver: it dies with the launcher that started it.

multiprocessing starts the forkserver; its preload list is the one hook that runs inside it before
torch's import (seconds), so a launcher killed meanwhile (SIGKILL included) leaves no forkserver.
"""

from hal import children

children.die_with_parent()
