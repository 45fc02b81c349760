"""Generated protobuf stubs of the kinema4d contracts (tools/gen_protos.py)."""
