"""`POST /v1/messages/{id}:input`: answer the question a waiting message asks (INPUT_REQUIRED), signed like every
/v1 route; the use case is reach.ops.turns (docs/http.md#post-v1messagesidinput)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from reach.core.turns import AnswerRefused
from reach.gateway import checks
from reach.gateway.bodies import ErrorBody, InputRequestBody
from reach.gateway.intake import Admission, status_url, unavailable_as_503
from reach.gateway.openapi import READ_ERRORS, request_body
from reach.gateway.routes_envelopes import signed
from reach.ops import turns

MAX_INPUT_BODY = 40 * 1024  # a 32 KiB answer and its message id


class InputTaken(BaseModel):
    """The answer was taken: the message runs again as `generation` (its next turn); `status_url` follows it."""

    message_id: str
    generation: int
    turn: int
    status_url: str


INPUT_RESPONSES: dict[int | str, dict[str, Any]] = {
    **READ_ERRORS,
    400: {"model": ErrorBody, "description": "the body is not JSON naming this message with an `answer`, or the "
                                             "answer breaks the question's schema (`invalid_answer`)"},
    404: {"model": ErrorBody, "description": "no such message for the app's tenant"},
    408: {"model": ErrorBody, "description": "the body did not arrive in time"},
    409: {"model": ErrorBody, "description": "the message is not waiting for an answer (`not_waiting`), or its "
                                             "question was already answered (`already_answered`)"},
    410: {"model": ErrorBody, "description": "the message's budget ended (`expired`), or its envelope is gone"},
    413: {"model": ErrorBody, "description": "a body over 40 KiB, or an answer over 32 KiB"}}


def input_routes(admission: Admission) -> APIRouter:
    router = APIRouter(tags=["status"])

    @router.post("/v1/messages/{message_id}:input", status_code=202, response_model=InputTaken,
                 responses=INPUT_RESPONSES, openapi_extra=request_body(InputRequestBody),
                 summary="Answer a message waiting for input")
    async def answer(message_id: str, request: Request) -> JSONResponse:
        """202 once the next turn is on the bus: the answer, checked against the question's schema, reaches the
        same agent as the message's next generation. The signed body names the message (`{"message_id": ...,
        "answer": ...}`), as a cancel's does."""
        app, document = await signed(request, admission, MAX_INPUT_BODY)
        if not isinstance(document, dict) or document.get("message_id") != message_id or "answer" not in document \
                or set(document) - {"message_id", "answer"}:
            raise checks.Refusal(400, "bad_request", "the signed body must name the message it answers and carry "
                                 f'the answer: {{"message_id": "{message_id}", "answer": ...}}',
                                 "sign that body and send it")
        store = admission.deps.turns
        if store is None:
            raise checks.Refusal(503, "unavailable", "this gateway does not take answers")
        await admission.take_read(app)
        try:
            with unavailable_as_503():
                taken = await turns.answer(message_id, document["answer"], tenant=app.tenant,
                                           rows=admission.deps.status.message, store=store,
                                           now_ms=admission.deps.clock_ms(),
                                           authorize=lambda capability: admission.authorize_answer(app, capability))
        except AnswerRefused as refused:
            raise checks.Refusal(refused.status, refused.code, refused.message, refused.hint) from None
        body = InputTaken(message_id=message_id, generation=taken.generation, turn=taken.turn,
                          status_url=status_url(message_id))
        return JSONResponse(body.model_dump(), status_code=202)

    return router
