"""A scorer module of one's own, as the ``scorer_modules`` setting names it: it registers on import."""

import uuid

from actors.engine.credit import CreditContext, default_scorer, register_scorer


@register_scorer("plugin_scorer", replace=True)
def plugin_scorer(ctx: CreditContext) -> dict[uuid.UUID, float]:
    return default_scorer(ctx)
