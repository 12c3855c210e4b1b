"""The gateway's gRPC ingress (`reach gateway --grpc-port`, docs/grpc.md); `v1` holds the code generated from
proto/reach/grpc/v1/gateway.proto (tests/unit/grpc/test_grpc_generated.py keeps it current)."""
