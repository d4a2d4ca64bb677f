"""A real S3-compatible server for tests: moto in server mode (HTTP on loopback, in a thread of the
test process), one bucket, and the standard AWS_* variables pointing at it, so `s3://` storage URLs
work in this process (s3fs reads them) and in the worker processes it starts (they inherit them).

    with moto_s3() as bucket:          # environment set inside the block, restored after
        Storage(f"s3://{bucket}/lcsb")
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Iterator
from contextlib import contextmanager

ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION")


@contextmanager
def moto_s3() -> Iterator[str]:
    """Start the server on a free port, create a bucket, set the AWS_* environment; yields the bucket
    name. Everything is stopped and restored when the block ends."""
    import boto3
    import fsspec
    from moto.server import ThreadedMotoServer

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    saved = {name: os.environ.get(name) for name in ENV}
    os.environ.update(AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test",
                      AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}", AWS_DEFAULT_REGION="us-east-1")
    fsspec.filesystem("s3").clear_instance_cache()  # no client built for another endpoint
    bucket = f"lcsb-{secrets.token_hex(4)}"
    try:
        boto3.client("s3").create_bucket(Bucket=bucket)
        yield bucket
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        fsspec.filesystem("s3").clear_instance_cache()
        server.stop()
