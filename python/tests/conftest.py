"""Makes ``mlcd`` importable for the unit tests straight from python/src/mlcd, with its
``mlcd.v1`` messages and stubs generated from proto/ into a temporary folder for the session.

The stubs are generated as the package build does (setup.py) when ``grpc_tools`` is importable
(its protobuf matches the interpreter's runtime); otherwise with ``protoc`` and
``grpc_python_plugin`` (Debian's protobuf-compiler and protobuf-compiler-grpc, whose protobuf
matches python3-protobuf), found by $MLCD_PROTOC and $MLCD_GRPC_PYTHON_PLUGIN (the CTest suite
sets them to what CMake found) or on PATH. Nothing is written into the source tree: the
package's search path is python/src/mlcd followed by the temporary folder's mlcd/, so the tests
run the source files themselves.

No MLCD_* variable of the caller's environment reaches a test (``_clean_environment``).
"""
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE_DIR = os.path.join(PYTHON_DIR, "src", "mlcd")
PROTO_ROOT = os.path.join(os.path.dirname(PYTHON_DIR), "proto")
PROTO_PACKAGE = os.path.join("mlcd", "v1")


def _proto_files():
    folder = os.path.join(PROTO_ROOT, PROTO_PACKAGE)
    return sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".proto"))


def _generate_stubs(out):
    """Writes mlcd/v1/*_pb2.py and *_pb2_grpc.py under ``out``; pytest.exit saying what is
    missing when neither generator is there."""
    os.makedirs(os.path.join(out, PROTO_PACKAGE))
    files = _proto_files()
    common = [f"--proto_path={PROTO_ROOT}", f"--python_out={out}", f"--grpc_python_out={out}"]
    try:
        from grpc_tools import protoc
    except ImportError:
        protoc = None
    if protoc is not None:
        include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
        if protoc.main(["grpc_tools.protoc", f"--proto_path={include}"] + common + files) != 0:
            pytest.exit("grpc_tools.protoc failed on proto/mlcd/v1", returncode=3)
    else:
        compiler = os.environ.get("MLCD_PROTOC") or shutil.which("protoc")
        plugin = os.environ.get("MLCD_GRPC_PYTHON_PLUGIN") or shutil.which("grpc_python_plugin")
        if not compiler or not plugin:
            pytest.exit("the mlcd.v1 stubs need grpcio-tools, or protoc and grpc_python_plugin "
                        "(apt-get install protobuf-compiler protobuf-compiler-grpc; "
                        "scripts/setup.sh installs both)", returncode=3)
        try:
            run = subprocess.run([compiler, f"--plugin=protoc-gen-grpc_python={plugin}"] +
                                 common + files, capture_output=True, text=True)
        except OSError as e:
            pytest.exit(f"cannot run {compiler}: {e}", returncode=3)
        if run.returncode != 0:
            pytest.exit(f"{compiler} failed on proto/mlcd/v1:\n{run.stderr}", returncode=3)
    with open(os.path.join(out, PROTO_PACKAGE, "__init__.py"), "w") as f:
        f.write('"""mlcd.v1, generated for the unit tests."""\n')


def _import_package(stubs):
    """Imports ``mlcd`` from the source tree, its subpackages searched there and in ``stubs``."""
    spec = importlib.util.spec_from_file_location(
        "mlcd", os.path.join(PACKAGE_DIR, "__init__.py"),
        submodule_search_locations=[PACKAGE_DIR, os.path.join(stubs, "mlcd")])
    module = importlib.util.module_from_spec(spec)
    sys.modules["mlcd"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["mlcd"]
        raise


_STUBS_DIR = None


def pytest_configure(config):
    global _STUBS_DIR
    _STUBS_DIR = tempfile.mkdtemp(prefix="mlcd-pytest-stubs-")
    _generate_stubs(_STUBS_DIR)
    _import_package(_STUBS_DIR)


def pytest_unconfigure(config):
    if _STUBS_DIR is not None:
        shutil.rmtree(_STUBS_DIR, ignore_errors=True)


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch):
    """Every test starts without MLCD_* variables (a shell that sourced .mlcd/local/env has
    them all)."""
    for name in list(os.environ):
        if name.startswith("MLCD_"):
            monkeypatch.delenv(name)
