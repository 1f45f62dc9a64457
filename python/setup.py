"""Build hook of the mlcd-client package: the gRPC stubs of mlcd.v1, generated at build time.

`build_py` runs grpc_tools.protoc over the proto files of mlcd.v1 and writes the modules
(`*_pb2.py`, their `.pyi` type stubs and `*_pb2_grpc.py`) into the build directory as the
package `mlcd.v1`, beside the hand-written `mlcd` package; nothing generated enters the source
tree. The proto files are found, in order, under $MLCD_PROTO_DIR, ./proto (an sdist: `sdist`
copies them there) and ../proto (a clone of the repository, which `pip install ./python`
builds in place).

The wheel depends on grpcio and protobuf no older than the generated code needs: the version of
grpcio-tools that generated it and the protobuf range grpcio-tools itself requires.
"""
import os
import shutil
import sys
from importlib import metadata

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
# The proto files of the API, relative to the proto root (imports are "mlcd/v1/<name>.proto").
PROTO_PACKAGE = os.path.join("mlcd", "v1")


def proto_root():
    """The first folder holding mlcd/v1/*.proto; SystemExit saying where it looked otherwise."""
    candidates = [os.environ.get("MLCD_PROTO_DIR", ""), os.path.join(HERE, "proto"),
                  os.path.join(HERE, os.pardir, "proto")]
    for root in candidates:
        if root and os.path.isfile(os.path.join(root, PROTO_PACKAGE, "coordinator.proto")):
            return os.path.abspath(root)
    looked = ", ".join(os.path.abspath(c) for c in candidates if c)
    raise SystemExit(f"mlcd-client: no proto files (mlcd/v1/coordinator.proto) under {looked}; "
                     "build from a clone of the repository (pip install ./python) or set "
                     "MLCD_PROTO_DIR to its proto/ folder")


def proto_files(root):
    folder = os.path.join(root, PROTO_PACKAGE)
    return sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".proto"))


def generated_dependencies():
    """grpcio >= the generating grpcio-tools, protobuf as grpcio-tools requires it."""
    try:
        tools_version = metadata.version("grpcio-tools")
        tools_requires = metadata.requires("grpcio-tools") or []
    except metadata.PackageNotFoundError:
        return ["grpcio", "protobuf"]  # metadata only (e.g. egg_info); build_py needs the tools
    protobuf = [r.split(";")[0].replace(" ", "") for r in tools_requires
                if r.replace(" ", "").lower().startswith("protobuf")]
    return [f"grpcio>={tools_version}"] + (protobuf[:1] or ["protobuf"])


class BuildPyWithStubs(build_py):
    """build_py, then the stubs of mlcd.v1 into the build directory."""

    def run(self):
        super().run()
        try:
            from grpc_tools import protoc
        except ImportError:
            raise SystemExit("mlcd-client: building needs grpcio-tools (pip install grpcio-tools, "
                             "or let pip's build isolation install it)")
        root = proto_root()
        out = os.path.abspath(self.build_lib)
        os.makedirs(os.path.join(out, PROTO_PACKAGE), exist_ok=True)
        include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
        args = ["grpc_tools.protoc", f"--proto_path={root}", f"--proto_path={include}",
                f"--python_out={out}", f"--pyi_out={out}", f"--grpc_python_out={out}"]
        files = proto_files(root)
        if protoc.main(args + files) != 0:
            raise SystemExit(f"mlcd-client: grpc_tools.protoc failed on {', '.join(files)}")
        with open(os.path.join(out, PROTO_PACKAGE, "__init__.py"), "w") as f:
            f.write('"""mlcd.v1: messages and stubs generated from proto/mlcd/v1 at build time."""\n')
        print(f"mlcd-client: generated mlcd.v1 from {len(files)} proto files in {root}",
              file=sys.stderr)


class SdistWithProtos(sdist):
    """sdist that carries the proto files (as proto/), so the sdist builds on its own."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        root = proto_root()
        dest = os.path.join(base_dir, "proto", PROTO_PACKAGE)
        os.makedirs(dest, exist_ok=True)
        for path in proto_files(root):
            shutil.copy2(path, dest)


setup(cmdclass={"build_py": BuildPyWithStubs, "sdist": SdistWithProtos},
      install_requires=generated_dependencies())
