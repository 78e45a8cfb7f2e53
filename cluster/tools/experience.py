"""Experience tools: query experiences for a situation, report whether served ones helped."""

# Annotations stay eager here: the SDK reads them.
import time
import uuid
from typing import Annotated

from mcp_types import CallToolResult
from pydantic import Field, JsonValue, StrictBool, StrictFloat, StrictInt

from actors.engine.model.templates import ExperienceTemplate, render_prompt_block
from cluster.core.types import Name
from cluster.experience.models import MAX_TOP_K, ExperienceQueryResult, OutcomeReport, Situation
from cluster.tools.common import ToolContext, answer, tool_errors, toolbox
from cluster.tools.ids import TrajectoryName, trajectory_uuid

NOTHING_SERVED = "No experience matches this situation yet."


def nothing_served(result: ExperienceQueryResult) -> str:
    """The answer to a query that served nothing: one line naming the templates just below the
    threshold, and one naming the actions that never worked at this decision, if any."""
    lines = [NOTHING_SERVED if result.below_threshold is None else f"{NOTHING_SERVED} {result.below_threshold.line()}."]
    if result.never_worked:
        lines.append(result.never_worked_line())
    return "\n".join(lines)


async def query_experience(
    ctx: ToolContext,
    context: Annotated[str, Field(description="Your situation in words; may be empty with a snapshot.")] = "",
    context_snapshot: Annotated[
        dict[str, JsonValue] | None, Field(description="What you see now, as you record it.")
    ] = None,
    available_actions: Annotated[list[str] | None, Field(description="The actions you can take now.")] = None,
    decision: Annotated[str | None, Field(description="Name of this decision or step.")] = None,
    role: Annotated[Name, Field(description="Your role; only its experiences are served.")] = "agent",
    task_type: Annotated[Name | None, Field(description="Only this task type; default all.")] = None,
    top_k: Annotated[
        StrictInt | None,
        Field(ge=1, le=MAX_TOP_K, description="How many; default {experience_top_k}, at most {max_experiences}."),
    ] = None,
    min_confidence: Annotated[
        StrictFloat | None,
        Field(
            ge=0,
            le=1,
            description="Lowest confidence served; default {confidence_threshold} (costlier fallback: 1/cost ratio).",
        ),
    ] = None,
    include_other_roles: Annotated[StrictBool, Field(description="Also serve other roles' experiences.")] = False,
    include_inapplicable: Annotated[
        StrictBool, Field(description="Also those whose condition is false in your snapshot.")
    ] = False,
    detail: Annotated[StrictBool, Field(description="Also full templates: provenance, support, caveats.")] = False,
) -> Annotated[CallToolResult, ExperienceQueryResult]:
    """Experiences from earlier tasks for your decision, best first. Send your situation
    (context_snapshot, available_actions) or words. Text: a prompt block. Data: each experience's id,
    condition, recommended action, action to avoid (avoid_reason fails, or costlier: your fallback),
    retry, confidence; never_worked: actions that only failed here; if none passes
    min_confidence, below_threshold names up to {max_below_threshold} under it. Pass ids you used
    to finalize_trajectory."""
    box = toolbox(ctx)
    owner = box.owner(ctx)
    with tool_errors():
        box.services.capture.limits.check_query(context, context_snapshot)
    situation = None
    if context_snapshot is not None or available_actions is not None or decision is not None:
        with tool_errors():
            situation = Situation(
                context_snapshot=context_snapshot or {},
                available_actions=tuple(available_actions or ()),
                decision=decision,
            )
    start = time.perf_counter()
    result = await box.call(
        box.services.experience.query_experience,
        owner,
        context,
        role,
        task_type,
        top_k,
        min_confidence,
        include_other_roles,
        situation=situation,
        include_inapplicable=include_inapplicable,
    )
    metrics = box.services.metrics
    metrics.retrieval_latency.labels("experience").observe(time.perf_counter() - start)
    metrics.experience_queries.labels("hit" if result.experiences else "miss").inc()
    if detail:
        block = render_prompt_block([s.template for s in result.templates], full=True)
        return answer(result, block or nothing_served(result))
    return answer(result.lean(), result.prompt_block or nothing_served(result))


async def report_experience_outcome(
    template_ids: Annotated[
        list[uuid.UUID],
        Field(min_length=1, max_length=MAX_TOP_K, description="Ids of the experiences you applied, as served."),
    ],
    succeeded: Annotated[StrictBool, Field(description="Did the task succeed after applying them?")],
    ctx: ToolContext,
    trajectory_id: Annotated[
        TrajectoryName | None,
        Field(description="The task's trajectory, if recorded: a repeated report then counts once."),
    ] = None,
) -> OutcomeReport:
    """Tell hindsight whether served experiences helped (confidence rises or falls).
    finalize_trajectory with served_template_ids does this for you."""
    box = toolbox(ctx)
    owner = box.owner(ctx)
    stored_id = None if trajectory_id is None else trajectory_uuid(owner, trajectory_id)
    return await box.call(box.services.experience.report_outcome, owner, template_ids, succeeded, stored_id)


async def read_experience(
    template_id: Annotated[uuid.UUID, Field(description="An experience's id, as served.")], ctx: ToolContext
) -> Annotated[CallToolResult, ExperienceTemplate]:
    """One experience whole: rule and reasons as text; support and provenance too as data."""
    box = toolbox(ctx)
    owner = box.owner(ctx)
    template = await box.call(box.services.experience.get_template, owner, template_id)
    return answer(template, f"{template.render()} Confidence {template.confidence:.2f}.")


TOOLS = (query_experience, report_experience_outcome, read_experience)
"""This module's tools, in the order the server lists them."""
