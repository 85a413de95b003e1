"""A beat scheduler told to stop (SIGTERM) half-way through being built, as systemd may."""

import logging
import os
import signal
from typing import Any

from celery.beat import PersistentScheduler

_signalled = False


class TermWhileBuilt(PersistentScheduler):
    def _open_schedule(self) -> Any:
        global _signalled
        store = super()._open_schedule()
        logging.getLogger("celery.beat").info("schedule opened")  # once per scheduler built
        if not _signalled:  # once: a rebuild from the handler must not signal again
            _signalled = True
            os.kill(os.getpid(), signal.SIGTERM)  # handled here, the schedule file open
        return store
