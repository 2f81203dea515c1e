"""The idle stop's token check itself (door/idtoken.py), on tokens minted by the test signer: the
VM's account is recognised by ``email`` or, in a token without one, by ``sub``/``azp`` equal to its
unique id; a token of any other account is refused either way. (test_door_idle_stop.py runs the same
check through the real door.)"""

from __future__ import annotations

import asyncio
import json

import pytest

from door.idtoken import TokenError, Verifier
from tests.door.conftest import VM_ACCOUNT
from tests.door.google_fakes import VM_ACCOUNT_ID, Signer

AUDIENCE = "https://qwen36-door-123456789012.us-central1.run.app"
OTHER_ID = "109876543210987654321"


@pytest.fixture(scope="module")
def signer() -> Signer:
    return Signer.new()


def _verify(signer: Signer, token: str, account_id: str = VM_ACCOUNT_ID) -> dict[str, object]:
    async def fetch() -> tuple[bytes, str]:
        return json.dumps({"keys": [signer.jwk()]}).encode(), "max-age=3600"

    verifier = Verifier(
        fetch, audiences=(AUDIENCE,), service_account=VM_ACCOUNT, service_account_id=account_id
    )
    return asyncio.run(verifier.verify(token))


def test_a_token_naming_the_account_only_by_its_unique_id_is_accepted(signer: Signer) -> None:
    by_sub = signer.token(audience=AUDIENCE, email=None, email_verified=None, azp=None)
    assert _verify(signer, by_sub)["sub"] == VM_ACCOUNT_ID
    by_azp = signer.token(audience=AUDIENCE, email=None, email_verified=None, sub=OTHER_ID)
    assert _verify(signer, by_azp)["azp"] == VM_ACCOUNT_ID
    assert _verify(signer, signer.token(audience=AUDIENCE, email=VM_ACCOUNT))["email"] == VM_ACCOUNT


def test_a_token_of_another_account_is_refused_by_email_and_by_id(signer: Signer) -> None:
    other_id = signer.token(audience=AUDIENCE, email=None, email_verified=None, sub=OTHER_ID, azp=OTHER_ID)
    with pytest.raises(TokenError, match=rf"sub '{OTHER_ID}' \(azp '{OTHER_ID}'\) is not the server's"):
        _verify(signer, other_id)
    # The VM's id with another account's email: the email decides.
    other_email = signer.token(audience=AUDIENCE, email="someone@acme-llm-test.iam.gserviceaccount.com")
    with pytest.raises(TokenError, match="email 'someone@"):
        _verify(signer, other_email)
    # Without the id configured, a token without email is refused (no proof of the account).
    by_sub = signer.token(audience=AUDIENCE, email=None, email_verified=None, azp=None)
    with pytest.raises(TokenError, match="email None is not the server's"):
        _verify(signer, by_sub, account_id="")
