"""A scorer for tests: the default scorer, slowed down on one task type (imported by every Ray actor).

It makes one attribution group finish well after another, so a test can check that the pool's
completion order does not reach the result.
"""

import time
import uuid

from actors.engine.credit import CreditContext, default_scorer, register_scorer

SLOW_TASK_TYPE = "import-slow"


@register_scorer("slow_on_one_task_type", replace=True)
def slow_on_one_task_type(ctx: CreditContext) -> dict[uuid.UUID, float]:
    if ctx.trajectory.header.task_type == SLOW_TASK_TYPE:
        time.sleep(0.5)
    return default_scorer(ctx)
