"""The export is OTLP/JSON: it parses into the OTLP protobuf ExportTraceServiceRequest.

OTLP/JSON writes trace and span ids in hex, where protobuf's own JSON mapping has
base64 for bytes (the one difference the OTLP spec makes): the test turns the ids into
base64 for protobuf's parser, as a collector's OTLP/JSON decoder does.
"""

import base64

import msgspec
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from headway.otlp.exporter import encode_attributes, encode_spans, export_request, rejected_spans
from headway.tracing.memory import MemorySink
from headway.tracing.spans import SpanKind, Tracer, span

INCOMING = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def parsed(request: bytes) -> ExportTraceServiceRequest:
    encoded = msgspec.json.decode(request)
    for resource in encoded["resourceSpans"]:
        for each in resource["scopeSpans"][0]["spans"]:
            for field in ("traceId", "spanId", "parentSpanId"):
                if field in each:
                    each[field] = base64.b64encode(bytes.fromhex(each[field])).decode()
    return json_format.ParseDict(encoded, ExportTraceServiceRequest())


def test_spans_encode_as_an_export_request_with_ids_kinds_status_and_typed_attributes():
    sink = MemorySink()
    server = Tracer(sink).server(INCOMING, "POST /v1/embeddings", {"http.route": "/v1/embeddings"})
    with server:  # noqa: SIM117 - the child is made inside its parent's block
        with span("POST /internal/embed", {"headway.chunk.texts": 3}, SpanKind.CLIENT) as call:
            call.set("headway.cache.hit", False)
            call.set("headway.share", 0.5)
            call.set("http.response.status_code", 1)
            call.fail("upstream_error")
    resource = encode_attributes({"service.name": "headway-gateway"})
    request = export_request(resource, [encode_spans(sink.spans)])
    assert msgspec.json.decode(request)["resourceSpans"][0]["scopeSpans"][0]["spans"][0][
        "traceId"
    ] == ("4bf92f3577b34da6a3ce929d0e0e4736")
    (resource,) = parsed(request).resource_spans
    assert resource.resource.attributes[0].value.string_value == "headway-gateway"
    client, server = resource.scope_spans[0].spans
    assert server.trace_id.hex() == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert server.parent_span_id.hex() == "00f067aa0ba902b7"
    assert client.parent_span_id == server.span_id
    assert server.kind == 2 and client.kind == 3  # SERVER, CLIENT
    assert client.status.code == 2 and client.status.message == "upstream_error"
    assert server.status.code == 0
    values = {a.key: a.value for a in client.attributes}
    assert values["headway.chunk.texts"].int_value == 3
    assert values["headway.cache.hit"].bool_value is False
    assert values["headway.share"].double_value == 0.5
    assert values["http.response.status_code"].int_value == 1
    assert 0 < client.start_time_unix_nano <= client.end_time_unix_nano


def test_an_item_found_again_keeps_its_type():
    """Items are kept by (key, value); True equals 1 and False equals 0 as dict keys."""
    for _ in range(2):  # the second time, from what the first kept
        items = encode_attributes({"a": 1, "b": True, "c": 0, "d": False, "e": "x", "f": 7})
        assert msgspec.json.decode(b"[" + items + b"]") == [
            {"key": "a", "value": {"intValue": "1"}},
            {"key": "b", "value": {"boolValue": True}},
            {"key": "c", "value": {"intValue": "0"}},
            {"key": "d", "value": {"boolValue": False}},
            {"key": "e", "value": {"stringValue": "x"}},
            {"key": "f", "value": {"intValue": "7"}},
        ]
    swapped = encode_attributes({"a": True, "b": 1, "c": False, "d": 0})
    assert [item["value"] for item in msgspec.json.decode(b"[" + swapped + b"]")] == [
        {"boolValue": True},
        {"intValue": "1"},
        {"boolValue": False},
        {"intValue": "0"},
    ]


def test_text_that_needs_escaping_stays_valid_json():
    items = encode_attributes({'he said "hi"\n': "tab\there \u2603 \\"})
    assert msgspec.json.decode(b"[" + items + b"]") == [
        {"key": 'he said "hi"\n', "value": {"stringValue": "tab\there \u2603 \\"}}
    ]


def test_a_partial_success_names_the_rejected_spans():
    assert rejected_spans(b"") == 0
    assert rejected_spans(b"{}") == 0
    assert rejected_spans(b'{"partialSuccess":{}}') == 0
    assert rejected_spans(b'{"partialSuccess":{"rejectedSpans":"3","errorMessage":"x"}}') == 3
    assert rejected_spans(b'{"partialSuccess":{"rejectedSpans":4}}') == 4
    assert rejected_spans(b"not json with rejectedSpans") == 0
