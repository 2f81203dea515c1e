"""The idle stop's endpoint: only a Google ID token of the VM's service account, for this door's
URL, signed by a current Google key, unexpired, makes the door resize its group to 0; and never
while it holds or streams a request."""

from __future__ import annotations

import threading
import time
import uuid

import httpx
import pytest

from tests.door.conftest import AUTH, VM_ACCOUNT, WorldFactory, ask, wait_for
from tests.door.google_fakes import Signer

pytestmark = pytest.mark.llama

AUDIENCE = "https://qwen36-door-123456789012.us-central1.run.app"
STOP = "/_qwen36/idle-stop"


def _stop(url: str, token: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return httpx.post(f"{url}{STOP}", headers=headers, timeout=30)


def test_only_the_vms_valid_id_token_stops_the_group(make_world: WorldFactory, signer: Signer) -> None:
    world = make_world(size=1)
    other_key = Signer.new()  # the same kid, another key: a forged signature
    good = signer.token(audience=AUDIENCE, email=VM_ACCOUNT)
    head, claims, _ = good.split(".")
    other_claims = signer.token(audience=AUDIENCE, email="x@acme-llm-test.iam.gserviceaccount.com").split(
        "."
    )[1]
    refused = {
        "no token": None,
        "not a JWT": "not-a-jwt",
        "the API key": "door-test-key-0123456789",
        "another audience": signer.token(audience="https://other-service.run.app", email=VM_ACCOUNT),
        "another account": signer.token(
            audience=AUDIENCE, email="someone@acme-llm-test.iam.gserviceaccount.com"
        ),
        # Without `email`, the token's sub (or azp) must be the VM account's unique id.
        "another account's id, no email": signer.token(
            audience=AUDIENCE, email=None, email_verified=None, sub="109876543210987654321", azp=None
        ),
        "unverified email": signer.token(audience=AUDIENCE, email=VM_ACCOUNT, email_verified=False),
        "expired": signer.token(audience=AUDIENCE, email=VM_ACCOUNT, issued=time.time() - 7200),
        "issued in the future": signer.token(audience=AUDIENCE, email=VM_ACCOUNT, issued=time.time() + 600),
        "another issuer": signer.token(audience=AUDIENCE, email=VM_ACCOUNT, iss="https://evil.example.com"),
        "forged signature": other_key.token(audience=AUDIENCE, email=VM_ACCOUNT),
        "unknown key id": signer.token(audience=AUDIENCE, email=VM_ACCOUNT, header={"kid": "nope"}),
        "alg none": f"{head}.{claims}.",
        "alg HS256": signer.token(audience=AUDIENCE, email=VM_ACCOUNT, header={"alg": "HS256"}),
        "claims swapped in": ".".join([head, other_claims, good.split(".")[2]]),
    }
    for why, token in refused.items():
        reply = _stop(world.url, token)
        assert reply.status_code == 401, (why, reply.text)
        assert reply.json()["error"]["type"] == "authentication_error"
    assert world.group.resizes() == []

    reply = _stop(world.url, good)
    assert reply.status_code == 200, reply.text
    assert reply.json()["stopped"] is True
    (resize,) = world.group.resizes()
    assert resize.query["size"] == ["0"]
    uuid.UUID(resize.query["requestId"][0])
    wait_for(lambda: world.member.server is None, 15, "the group to delete the member")
    assert httpx.get(f"{world.url}/health", headers=AUTH).json()["server"] == "asleep"
    # The next request wakes it again.
    reply = httpx.post(f"{world.url}/v1/chat/completions", headers=AUTH, json=ask(), timeout=60)
    assert reply.status_code == 200
    assert [c.query["size"] for c in world.group.resizes()] == [["0"], ["1"]]


def test_the_stop_is_refused_while_the_door_streams_or_holds(
    make_world: WorldFactory, signer: Signer
) -> None:
    world = make_world(size=1)
    token = signer.token(audience=AUDIENCE, email=VM_ACCOUNT)
    with httpx.stream(
        "POST", f"{world.url}/v1/chat/completions", headers=AUTH, json=ask(20000, stream=True), timeout=60
    ) as reply:
        lines = reply.iter_lines()
        while not next(lines).startswith("data: {"):
            pass
        busy = _stop(world.url, token)
        assert busy.status_code == 409, busy.text
        assert "holds or streams 1 request" in busy.json()["error"]["message"]
    assert world.group.resizes() == []
    # Once the stream has ended the same token (valid for an hour) gets the stop.
    wait_for(
        lambda: httpx.get(f"{world.url}/health", headers=AUTH).json()["busy"] == 0, 5, "the stream's end"
    )
    assert _stop(world.url, token).status_code == 200
    # Held for a wake: refused too.
    world2 = make_world(size=0, boot_s=30.0)
    held = httpx.Client(timeout=60)
    threading.Thread(
        target=lambda: held.post(f"{world2.url}/v1/chat/completions", headers=AUTH, json=ask()), daemon=True
    ).start()
    wait_for(lambda: world2.group.resizes(), 10, "the wake's resize")
    assert _stop(world2.url, token).status_code == 409
