"""Generated from proto/reach/grpc/v1/gateway.proto by grpcio-tools (`make proto`); do not edit."""
