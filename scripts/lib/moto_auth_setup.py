"""Sets up the second moto server of the tests, the one that checks every
request's credentials, signature and IAM permissions (lock-dynamodb/tests/auth.rs).

    moto_auth_setup.py ENDPOINT

ENDPOINT is a moto server started WITHOUT INITIAL_NO_AUTH_ACTION_COUNT, so that
nothing is checked yet (scripts/lib/moto.sh, moto_start_auth). This creates, in
moto's default account 123456789012:

* user `locker`, allowed `dynamodb:*`: the good key;
* user `reader`, allowed `dynamodb:*` but denied `dynamodb:UpdateItem`,
  `PutItem` and `DeleteItem`: it can read locks and take none;
* role `lock-role`, allowed `dynamodb:*`, assumed once: temporary (ASIA)
  credentials with their session token;

then switches enforcement on for every later request (POST /moto-api/reset-auth
with 0: "let no more requests through unchecked"). It prints the endpoint and
credentials as NAME=VALUE lines for moto.sh to export:

    LOCK_DYNAMODB_AUTH_ENDPOINT, LOCK_AUTH_GOOD_KEY, LOCK_AUTH_GOOD_SECRET,
    LOCK_AUTH_DENIED_KEY, LOCK_AUTH_DENIED_SECRET,
    LOCK_AUTH_ROLE_KEY, LOCK_AUTH_ROLE_SECRET, LOCK_AUTH_ROLE_TOKEN

What moto checks, and how it answers (moto 5.2, docs/testing.md): the access
key must exist (an IAM user's key, or an assumed role's with its own session
token), the SigV4 signature must match its secret, and the user's or role's
policies must allow the action. moto reads no resource for DynamoDB, so a
policy's Resource must be "*" (a table ARN never matches) and conditions are
ignored. It answers a refusal with HTTP 403 and an IAM-style XML body
(InvalidClientTokenId, SignatureDoesNotMatch, AccessDenied), where DynamoDB
answers HTTP 400 with JSON (UnrecognizedClientException,
InvalidSignatureException, AccessDeniedException). It never checks when a
request was signed or when a session token expires: no ExpiredToken. Do not
call /moto-api/reset on this server: it deletes the users and keeps
enforcement on, which locks every key out.
"""
import json
import sys
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ElementTree

ALLOW_DYNAMODB = {"Effect": "Allow", "Action": "dynamodb:*", "Resource": "*"}
DENY_WRITES = {
    "Effect": "Deny",
    "Action": ["dynamodb:UpdateItem", "dynamodb:PutItem", "dynamodb:DeleteItem"],
    "Resource": "*",
}
TRUST_ANYONE = {"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}


def policy(*statements):
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def call(endpoint, service, action, **params):
    """One IAM or STS query-protocol call, unsigned (nothing is checked yet;
    moto picks the service from the credential scope, as moto.sh's warm-up
    does). Plain urllib, not boto3: importing boto3 costs more than the whole
    set-up. Returns {element name: text} of the answer (the names used here
    are unique in it)."""
    version = {"iam": "2010-05-08", "sts": "2011-06-15"}[service]
    body = urllib.parse.urlencode({"Action": action, "Version": version, **params})
    request = urllib.request.Request(
        endpoint + "/",
        data=body.encode(),
        method="POST",
        headers={
            "Content-Type": "application/x-www-form-urlencoded; charset=utf-8",
            "Authorization": "AWS4-HMAC-SHA256 "
            f"Credential=testing/20260101/us-east-1/{service}/aws4_request, "
            "SignedHeaders=host, Signature=0",
        },
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        root = ElementTree.fromstring(answer.read())
    return {element.tag.rsplit("}", 1)[-1]: element.text for element in root.iter()}


def main(endpoint):
    def user(name, *statements):
        call(endpoint, "iam", "CreateUser", UserName=name)
        call(
            endpoint,
            "iam",
            "PutUserPolicy",
            UserName=name,
            PolicyName="locks",
            PolicyDocument=policy(*statements),
        )
        key = call(endpoint, "iam", "CreateAccessKey", UserName=name)
        return key["AccessKeyId"], key["SecretAccessKey"]

    good = user("locker", ALLOW_DYNAMODB)
    denied = user("reader", ALLOW_DYNAMODB, DENY_WRITES)

    role = call(
        endpoint,
        "iam",
        "CreateRole",
        RoleName="lock-role",
        AssumeRolePolicyDocument=policy(TRUST_ANYONE),
    )
    call(
        endpoint,
        "iam",
        "PutRolePolicy",
        RoleName="lock-role",
        PolicyName="locks",
        PolicyDocument=policy(ALLOW_DYNAMODB),
    )
    temporary = call(
        endpoint, "sts", "AssumeRole", RoleArn=role["Arn"], RoleSessionName="lock-tests"
    )

    # From here on every request is checked (the count of unchecked ones is 0).
    # (Not form-encoded, urllib's default: Flask would parse the body as a form
    # and moto find it empty.)
    request = urllib.request.Request(
        endpoint + "/moto-api/reset-auth",
        data=b"0",
        method="POST",
        headers={"Content-Type": "text/plain"},
    )
    urllib.request.urlopen(request, timeout=60).read()

    values = {
        "LOCK_DYNAMODB_AUTH_ENDPOINT": endpoint,
        "LOCK_AUTH_GOOD_KEY": good[0],
        "LOCK_AUTH_GOOD_SECRET": good[1],
        "LOCK_AUTH_DENIED_KEY": denied[0],
        "LOCK_AUTH_DENIED_SECRET": denied[1],
        "LOCK_AUTH_ROLE_KEY": temporary["AccessKeyId"],
        "LOCK_AUTH_ROLE_SECRET": temporary["SecretAccessKey"],
        "LOCK_AUTH_ROLE_TOKEN": temporary["SessionToken"],
    }
    for name, value in values.items():
        # moto.sh reads NAME=VALUE lines; a value with a space or newline would
        # not survive that.
        if not value or any(c.isspace() for c in value):
            raise SystemExit(f"moto_auth_setup: unexpected {name}: {value!r}")
        print(f"{name}={value}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(sys.argv[1])
