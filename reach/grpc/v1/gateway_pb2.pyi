from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Routing(_message.Message):
    __slots__ = ("region", "session_key", "tags", "priority", "canary", "strict_tags")
    REGION_FIELD_NUMBER: _ClassVar[int]
    SESSION_KEY_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    CANARY_FIELD_NUMBER: _ClassVar[int]
    STRICT_TAGS_FIELD_NUMBER: _ClassVar[int]
    region: str
    session_key: str
    tags: _containers.RepeatedScalarFieldContainer[str]
    priority: int
    canary: bool
    strict_tags: bool
    def __init__(self, region: _Optional[str] = ..., session_key: _Optional[str] = ..., tags: _Optional[_Iterable[str]] = ..., priority: _Optional[int] = ..., canary: _Optional[bool] = ..., strict_tags: _Optional[bool] = ...) -> None: ...

class SendRequest(_message.Message):
    __slots__ = ("capability", "version", "payload", "payload_json", "routing", "budget_ms", "expire_at", "idempotency_key", "intent", "max_tokens", "max_cost", "callback", "callback_progress")
    CAPABILITY_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_JSON_FIELD_NUMBER: _ClassVar[int]
    ROUTING_FIELD_NUMBER: _ClassVar[int]
    BUDGET_MS_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_AT_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    INTENT_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_COST_FIELD_NUMBER: _ClassVar[int]
    CALLBACK_FIELD_NUMBER: _ClassVar[int]
    CALLBACK_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    capability: str
    version: str
    payload: _struct_pb2.Value
    payload_json: str
    routing: Routing
    budget_ms: int
    expire_at: int
    idempotency_key: str
    intent: str
    max_tokens: int
    max_cost: float
    callback: str
    callback_progress: bool
    def __init__(self, capability: _Optional[str] = ..., version: _Optional[str] = ..., payload: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., payload_json: _Optional[str] = ..., routing: _Optional[_Union[Routing, _Mapping]] = ..., budget_ms: _Optional[int] = ..., expire_at: _Optional[int] = ..., idempotency_key: _Optional[str] = ..., intent: _Optional[str] = ..., max_tokens: _Optional[int] = ..., max_cost: _Optional[float] = ..., callback: _Optional[str] = ..., callback_progress: _Optional[bool] = ...) -> None: ...

class InvokeRequest(_message.Message):
    __slots__ = ("request", "timeout_ms")
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    request: SendRequest
    timeout_ms: int
    def __init__(self, request: _Optional[_Union[SendRequest, _Mapping]] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class Accepted(_message.Message):
    __slots__ = ("message_id", "trace_id", "status_url")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_URL_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    trace_id: str
    status_url: str
    def __init__(self, message_id: _Optional[str] = ..., trace_id: _Optional[str] = ..., status_url: _Optional[str] = ...) -> None: ...

class ReceiptError(_message.Message):
    __slots__ = ("kind", "code", "message")
    KIND_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    kind: str
    code: str
    message: str
    def __init__(self, kind: _Optional[str] = ..., code: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class InvokeReply(_message.Message):
    __slots__ = ("message_id", "trace_id", "status", "result", "receipt_error", "agent_id", "instance_id", "error", "message", "hint")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_ERROR_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    HINT_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    trace_id: str
    status: str
    result: _struct_pb2.Value
    receipt_error: ReceiptError
    agent_id: str
    instance_id: str
    error: str
    message: str
    hint: str
    def __init__(self, message_id: _Optional[str] = ..., trace_id: _Optional[str] = ..., status: _Optional[str] = ..., result: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., receipt_error: _Optional[_Union[ReceiptError, _Mapping]] = ..., agent_id: _Optional[str] = ..., instance_id: _Optional[str] = ..., error: _Optional[str] = ..., message: _Optional[str] = ..., hint: _Optional[str] = ...) -> None: ...

class GetStatusRequest(_message.Message):
    __slots__ = ("message_id",)
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    def __init__(self, message_id: _Optional[str] = ...) -> None: ...

class MessageStatus(_message.Message):
    __slots__ = ("message_id", "status", "row")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ROW_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    status: str
    row: _struct_pb2.Struct
    def __init__(self, message_id: _Optional[str] = ..., status: _Optional[str] = ..., row: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class WatchStepsRequest(_message.Message):
    __slots__ = ("message_id", "after")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    after: int
    def __init__(self, message_id: _Optional[str] = ..., after: _Optional[int] = ...) -> None: ...

class Step(_message.Message):
    __slots__ = ("event", "index", "data")
    EVENT_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    event: str
    index: int
    data: _struct_pb2.Struct
    def __init__(self, event: _Optional[str] = ..., index: _Optional[int] = ..., data: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...
