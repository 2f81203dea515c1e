"""startup/vm_agent.py's own behaviour that the agents' tests do not show: the access token is
read from the metadata server once and reused until TOKEN_MARGIN_S before it expires."""

from __future__ import annotations

import pytest
from vm_agent import TOKEN_MARGIN_S, Metadata

from tests.idle.vm_fakes import TOKEN, FakeMetadata, fake_metadata

TOKEN_KEY = "instance/service-accounts/default/token"


@pytest.mark.parametrize(
    ("expires_in", "reads"),
    [(3599, 1), (int(TOKEN_MARGIN_S) - 1, 3)],
    ids=["reused", "too-near-expiry-to-reuse"],
)
def test_token_is_reused_until_near_its_expiry(expires_in: int, reads: int) -> None:
    md = FakeMetadata(token_expires_in=expires_in)
    with fake_metadata(md) as url:
        metadata = Metadata(url)
        assert [metadata.token() for _ in range(3)] == [TOKEN] * 3
    assert md.reads.count(TOKEN_KEY) == reads
