"""Receipt status -> A2A task state: the one mapping table (docs/a2a.md shows it, tests walk it)."""

from __future__ import annotations

from a2a.types.a2a_pb2 import TaskState

from reach.records import Status

# One entry per Status: a status added to the records without a row here fails tests/unit/a2a/test_states.py.
TASK_STATES: dict[Status, TaskState] = {
    Status.ACCEPTED: TaskState.TASK_STATE_SUBMITTED,
    Status.ROUTED: TaskState.TASK_STATE_SUBMITTED,
    Status.RETRY_SCHEDULED: TaskState.TASK_STATE_SUBMITTED,
    Status.STARTED: TaskState.TASK_STATE_WORKING,
    Status.ATTEMPT_FAILED: TaskState.TASK_STATE_WORKING,
    Status.COMPLETED: TaskState.TASK_STATE_COMPLETED,
    Status.FAILED: TaskState.TASK_STATE_FAILED,
    Status.EXPIRED: TaskState.TASK_STATE_FAILED,
    Status.DEAD_LETTERED: TaskState.TASK_STATE_FAILED,
    Status.REJECTED: TaskState.TASK_STATE_REJECTED,
    Status.UNROUTABLE: TaskState.TASK_STATE_REJECTED,
    Status.CANCELED: TaskState.TASK_STATE_CANCELED,
    Status.INTENT_RESOLVED: TaskState.TASK_STATE_SUBMITTED,  # resolved to a capability, not yet routed
    # delivery steps of a channel send follow a terminal status: they never change the task's state
    Status.SENT: TaskState.TASK_STATE_UNSPECIFIED,
    Status.DELIVERED: TaskState.TASK_STATE_UNSPECIFIED,
    Status.READ: TaskState.TASK_STATE_UNSPECIFIED,
    Status.CALLBACKED: TaskState.TASK_STATE_UNSPECIFIED,
    Status.BOUNCED: TaskState.TASK_STATE_UNSPECIFIED,
    # a handler's progress and partial results: a row's status never becomes PROGRESS (reach.core.lifecycle)
    Status.PROGRESS: TaskState.TASK_STATE_UNSPECIFIED,
    Status.UNKNOWN: TaskState.TASK_STATE_UNSPECIFIED,
    # the handler asked a question (NeedsInput): the caller answers with message/send carrying the task id
    Status.INPUT_REQUIRED: TaskState.TASK_STATE_INPUT_REQUIRED,
    # an event on a subscribe capability: its deliveries to the subscribers run (reach.core.fanout)
    Status.FANNED_OUT: TaskState.TASK_STATE_WORKING,
}

FINAL = frozenset({TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_REJECTED,
                   TaskState.TASK_STATE_CANCELED})
INTERRUPTED = frozenset({TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED})
"""States a blocking send returns at, besides the final ones: the task waits for the caller (auth-required is an
INPUT_REQUIRED row whose question asks for authorization: reach.a2a.tasks.row_state)."""


def task_state(status: str) -> TaskState:
    """The A2A state of a status row's `status` (a status this build does not know: unspecified)."""
    try:
        return TASK_STATES[Status(status)]
    except ValueError:
        return TaskState.TASK_STATE_UNSPECIFIED


def state_name(state: TaskState) -> str:
    """`TASK_STATE_COMPLETED` -> `completed`: how docs and history messages name a state."""
    return TaskState.Name(state).removeprefix("TASK_STATE_").lower()
