"""Generate the Python stubs of proto/kinema4d/v1 into libs/runtime/src.

The stubs are committed; tests/contract/test_proto_contracts.py
(test_committed_stubs_match_generated) regenerates them into a temporary directory and
fails on any drift. Run `make protos` after editing a .proto file.
"""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROTO_ROOT = ROOT / "proto"
DEFAULT_OUT = ROOT / "libs" / "runtime" / "src"


def proto_files() -> list[Path]:
    return sorted((PROTO_ROOT / "kinema4d" / "v1").glob("*.proto"))


def generate(out_dir: Path) -> list[Path]:
    """Run protoc (grpcio-tools) for every contract; return the written files."""
    from grpc_tools import protoc

    out_dir.mkdir(parents=True, exist_ok=True)
    well_known = str(resources.files("grpc_tools") / "_proto")
    files = [str(p.relative_to(PROTO_ROOT)) for p in proto_files()]
    args = ["protoc", f"-I{PROTO_ROOT}", f"-I{well_known}", f"--python_out={out_dir}",
            f"--pyi_out={out_dir}", f"--grpc_python_out={out_dir}", *files]
    if protoc.main(args) != 0:
        raise RuntimeError("protoc failed: " + " ".join(args))
    package = out_dir / "kinema4d"
    for init in (package / "__init__.py", package / "v1" / "__init__.py"):
        init.write_text('"""Generated protobuf stubs of the kinema4d contracts (tools/gen_protos.py)."""\n')
    return sorted(p for p in package.rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    written = generate(args.out)
    print(f"generated {len(written)} files under {args.out / 'kinema4d'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
