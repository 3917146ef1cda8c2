"""The CRI stubs load with the installed protobuf and grpcio (their pins resolve together)."""

from __future__ import annotations

import subprocess
import sys


def test_cri_stubs_import_and_build_messages():
    from cri_api.v1 import api_pb2, api_pb2_grpc

    req = api_pb2.CreateContainerRequest(pod_sandbox_id="p")
    req.config.linux.resources.cpuset_cpus = "0-1"
    assert api_pb2.CreateContainerRequest.FromString(req.SerializeToString()).config.linux.resources.cpuset_cpus \
        == "0-1"
    assert hasattr(api_pb2_grpc, "RuntimeServiceStub")
    assert hasattr(api_pb2_grpc, "ImageServiceStub")


def test_pip_check_is_clean():
    r = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
