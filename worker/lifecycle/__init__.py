"""The turn's lifecycle: one service for claim, hand-over, takeover, stop, continue and the reaper.

Every status change of a turn is a step of the ledger's state machine (``ledger.turn``), carried
out by ``ledger.turns.TurnStore``; this floor decides which step to take and when, dispatches the
runs it records, keeps a running run's lease alive (``heartbeat``) and looks for turns nobody is
moving (``reaper``). The Celery task, the API, the CLI and the test harness all go through
``Lifecycle``.

May import: ``ledger``, ``worker.base``, ``worker.engine``. Never the edges (API, CLI, Celery
wiring), ``dev`` or ``tasks``.
"""

from worker.lifecycle.dispatch import Dispatcher
from worker.lifecycle.service import Decided, Lifecycle, NewTurn, Outcome

__all__ = ["Decided", "Dispatcher", "Lifecycle", "NewTurn", "Outcome"]
