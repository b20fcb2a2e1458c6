"""Drives python-dynamodb-lock 0.9.1 for the interop tests.

    lock.py try   KEY   acquire (waiting WAIT seconds), print the outcome, release
    lock.py hold  KEY   acquire, print the outcome, hold until a line on stdin, release

Endpoint, table, lease and wait come from the environment (ENDPOINT, TABLE,
LEASE, WAIT). Prints one JSON object per line.
"""
import datetime
import json
import os
import sys

import boto3
from python_dynamodb_lock.python_dynamodb_lock import DynamoDBLockClient, DynamoDBLockError

mode, key = sys.argv[1], sys.argv[2]
resource = boto3.resource(
    "dynamodb",
    endpoint_url=os.environ["ENDPOINT"],
    region_name="us-east-1",
    aws_access_key_id="testing",
    aws_secret_access_key="testing",
)
client = DynamoDBLockClient(
    resource,
    table_name=os.environ["TABLE"],
    owner_name="python-worker",
    lease_duration=datetime.timedelta(seconds=float(os.environ.get("LEASE", "10"))),
    heartbeat_period=datetime.timedelta(seconds=1),
)
try:
    lock = client.acquire_lock(
        key,
        retry_period=datetime.timedelta(milliseconds=200),
        retry_timeout=datetime.timedelta(seconds=float(os.environ.get("WAIT", "1"))),
    )
except DynamoDBLockError as error:
    print(json.dumps({"acquired": False, "code": error.code}), flush=True)
    client.close()
    sys.exit(0)
print(json.dumps({"acquired": True}), flush=True)
if mode == "hold":
    sys.stdin.readline()
lock.release()
client.close()
print(json.dumps({"released": True}), flush=True)
