"""The data model: downstream backends, their level history, upstream deliveries,
dispatches, jobs (one row per attempt, keyed like upstream) and their failed tests.

Every idempotency rule is a database constraint, so concurrent duplicates are settled by
the database rather than by a read-then-write race.

One module per sub-domain, all re-exported here, so `hud.models.X` names every model and
Django registers each one when it imports this package:

- `backends`: `Level`, `Downstream`, `LevelChange`, `AllowlistImport`, `LevelOverride`,
  `RepositoryAlias`
- `relay`: `Delivery`, `Dispatch`
- `jobs`: `Job`, `FailedTest`, `UsedToken`, `RateBucket`
- `accounts`: `BackendMaintainer`
- `promotion`: `PromotionRequest`, `GateExclusion`, `GateEvaluation`, `DemotionWarning`
- `checks`: `CheckRunMirror`, `GateCheck`, `OncallComment`, `RerunRequest`
- `notifications`: `NotificationTarget`, `Notification`
- `derived`: `LogicalJob`, `DailyRollup` (and `OutcomeClass`); `sql`: the callback path's SQL
- `lookups`: `__any`, a list lookup sent to PostgreSQL as one array
"""

import hud.models.lookups  # noqa: F401  (registers `__any`)
from hud.models.accounts import BackendMaintainer
from hud.models.backends import (
    AllowlistImport,
    Downstream,
    Level,
    LevelChange,
    LevelOverride,
    RepositoryAlias,
)
from hud.models.checks import CheckRunMirror, GateCheck, OncallComment, RerunRequest
from hud.models.derived import DailyRollup, LogicalJob
from hud.models.jobs import FailedTest, Job, RateBucket, UsedToken
from hud.models.notifications import Notification, NotificationTarget
from hud.models.promotion import DemotionWarning, GateEvaluation, GateExclusion, PromotionRequest
from hud.models.relay import Delivery, Dispatch

__all__ = [
    "AllowlistImport",
    "BackendMaintainer",
    "CheckRunMirror",
    "DailyRollup",
    "Delivery",
    "DemotionWarning",
    "Dispatch",
    "Downstream",
    "FailedTest",
    "GateCheck",
    "GateEvaluation",
    "GateExclusion",
    "Job",
    "Level",
    "LevelChange",
    "LevelOverride",
    "LogicalJob",
    "Notification",
    "NotificationTarget",
    "OncallComment",
    "PromotionRequest",
    "RateBucket",
    "RepositoryAlias",
    "RerunRequest",
    "UsedToken",
]
