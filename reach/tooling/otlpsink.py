"""A real OTLP/HTTP trace receiver on loopback: `POST /v1/traces` with an ExportTraceServiceRequest (protobuf,
optionally gzip), decoded by opentelemetry-proto and answered as a collector answers. The exporter in the Reach
processes talks to it exactly as it talks to the OpenTelemetry Collector's OTLP/HTTP receiver (same path, body
and answer). tests/integration/test_traces.py reads the spans back by trace id; `reach bench --modes tracing`
exports to it with `keep=False` (spans counted, not kept)."""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as the receiver decoded it (ids in hex, as a trace UI shows them)."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: int
    service: str
    attributes: dict[str, Any]
    links: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)  # (trace id, span id, attributes)


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return None if kind is None else getattr(value, kind)


def _attributes(pairs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in pairs}


class OtlpReceiver:
    """`with OtlpReceiver() as r:` serves on a free loopback port; `r.endpoint` is OTEL_EXPORTER_OTLP_ENDPOINT."""

    def __init__(self, *, keep: bool = True) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self.received = 0  # spans, kept or not
        self._keep_spans = keep
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces" or "protobuf" not in (self.headers.get("Content-Type") or ""):
                    self.send_response(404)
                    self.end_headers()
                    return
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver._keep(request)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp-receiver", daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def _keep(self, request: ExportTraceServiceRequest) -> None:
        if not self._keep_spans:
            count = sum(len(scope.spans) for rs in request.resource_spans for scope in rs.scope_spans)
            with self._lock:
                self.requests += 1
                self.received += count
            return
        found = []
        for resource_spans in request.resource_spans:
            service = str(_attributes(resource_spans.resource.attributes).get("service.name", ""))
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    found.append(ReceivedSpan(
                        trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(), name=span.name, kind=span.kind, service=service,
                        attributes=_attributes(span.attributes),
                        links=[(link.trace_id.hex(), link.span_id.hex(), _attributes(link.attributes))
                               for link in span.links]))
        with self._lock:
            self.requests += 1
            self.received += len(found)
            self.spans.extend(found)

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        """The spans received so far of one trace (32 hex digits)."""
        with self._lock:
            return [s for s in self.spans if s.trace_id == trace_id]

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()
