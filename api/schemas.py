"""The API's request and response bodies (pydantic, through django-ninja; they make the
OpenAPI schema). Request fields are typed for the schema and the docs, but checked by the
services (charts/services.py, common/validation.py), so a refusal says what the form,
the import and ``chart_submit`` say; only the body's shape (an object, no unknown field,
``workflow`` present) is pydantic's."""
from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from ninja import Schema
from pydantic import ConfigDict, Field, WithJsonSchema

Workflow = Annotated[Any, WithJsonSchema({"type": "string", "description": "The workflow's name.",
                                          "examples": ["code"]})]
Payload = Annotated[Any, WithJsonSchema({"type": ["object", "null"], "description": (
    "The workflow's input, a JSON object of at most FAIRSCHED_MAX_PAYLOAD_BYTES (1 MiB) of compact JSON; no NUL "
    "character, NaN or Infinity anywhere."), "examples": [{"seconds": 30}]})]
ExternalId = Annotated[Any, WithJsonSchema({"type": ["string", "null"], "maxLength": 200, "description": (
    "Your own id, unique in your org: the same external_id with the same workflow and payload returns the "
    "chart already submitted; with a different workflow or payload it is refused.")})]
Priority = Annotated[Any, WithJsonSchema({"type": "boolean", "default": False,
                                          "description": "Into the priority tier (FIFO before the round-robin)."})]
DueAt = Annotated[Any, WithJsonSchema({"type": ["string", "null"], "format": "date-time", "description": (
    "Its own due time (ISO 8601 with a zone, e.g. 2030-01-01T09:00:00Z). Without it the chart is due its "
    "creation plus its org's turnaround, if the org has one."), "examples": ["2030-01-01T09:00:00Z"]})]


class ChartIn(Schema):
    model_config = ConfigDict(extra="forbid")

    workflow: Workflow
    payload: Payload = None
    external_id: ExternalId = None
    priority: Priority = False
    due_at: DueAt = None


_CHART_ITEM = {k: v for k, v in ChartIn.model_json_schema().items() if k != "title"}


class BatchIn(Schema):
    model_config = ConfigDict(extra="forbid")

    charts: Annotated[list[Any], WithJsonSchema({
        "type": "array", "items": _CHART_ITEM,
        "description": "At most FAIRSCHED_API_BATCH_MAX (1,000) charts; all or nothing."})]


class ChartOut(Schema):
    id: int
    external_id: str | None
    workflow: str
    state: str = Field(description="queued, running, succeeded, failed or cancelled.")
    priority: bool
    paused: bool
    cancel_requested: bool
    position: int | None = Field(description="0-based place in the global fair order; null when none is known.")
    eta: datetime | None = Field(description="When it is expected to finish; null when none is known.")
    eta_p90: datetime | None = Field(description="The finish it should beat 9 times out of 10.")
    no_eta: str | None = Field(description=(
        "Why position or eta is null, as the pages say it: \"waiting for the scheduler's next pass to place "
        "it\", \"held: no ETA\", \"paused: no ETA until resumed\", \"blocked: cost above the budget\"; with "
        "capacity pools a blocked chart says which pool has no room for it, \"blocked: pool gpu has no room for "
        "it: capacity 0\"."))
    waits: str | None = Field(description=(
        "With capacity pools, why a queued chart waits because of a pool or its org's ceiling there: "
        "\"waiting for pool llm (8 of 8 in use)\" (it is at the head of the pool, waiting for room), \"in line "
        "for pool llm (8 of 8 in use)\" (behind the pool's head), \"at its "
        "ceiling in pool llm (4 of 4)\" (its org holds its ceiling there), or for a blocked chart \"pool gpu has "
        "no room for it: capacity 0\" (never under the current settings); null otherwise."))
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None
    rerun_of: int | None
    due_at: datetime | None = Field(description="When it is due: its own due_at, or its creation plus its "
                                                "org's turnaround; null when it has no due time.")
    due_state: str | None = Field(description=(
        "on_time, at_risk or late (queued or running, from the scheduler's latest pass), met or missed (finished); "
        "null without a due time or before the scheduler placed it."))
    slack_s: float | None = Field(description="The due time minus the ETA, in seconds (negative: late); null "
                                              "without a due time or an ETA.")
    url: str


class ChartList(Schema):
    charts: list[ChartOut]
    next: str | None = Field(description="The cursor of the next page (pass it as ?cursor=); null on the last.")


class BatchItem(Schema):
    id: int
    external_id: str | None
    created: bool = Field(description="false: the external_id was already submitted with the same content.")


class BatchOut(Schema):
    created: int
    existing: int
    charts: list[BatchItem] = Field(description="One per item, in the order sent.")


class StatusOut(Schema):
    model_config = ConfigDict(extra="allow")

    source: str = Field(description="scheduler (the latest snapshot) or db (no positions or ETAs).")
    seq: int | None
    generated_at: str | None
    org: dict[str, Any]
    total: int
    offset: int
    limit: int
    charts: list[dict[str, Any]]
    stale: bool
    age_s: float | None


class ProblemOut(Schema):
    """RFC 9457 problem details."""
    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    detail: str
    instance: str | None = None
    errors: dict[str, list[str]] = Field(description="Each field named (payload.steps[1], charts[3].external_id) "
                                                     "with its messages.")
