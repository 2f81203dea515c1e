"""The Secret Manager and Monitoring stand-in, with google-auth's own refresh pointed at it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import google.auth
import pytest

from qwen36.__main__ import main
from tests.gcp_fake.credentials import user_credentials
from tests.keys.google_fake import SECRET, FakeGoogle, fake_google


@dataclass
class Ran:
    code: int
    out: str
    err: str


@pytest.fixture
def google_api(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGoogle]:
    with fake_google() as fake:
        creds = user_credentials(fake.url)
        monkeypatch.setattr(google.auth, "default", lambda scopes=None, **kw: (creds, None))
        yield fake


@pytest.fixture
def keys(google_api: FakeGoogle, capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    """``qwen36 keys VERB ...`` against the stand-in; returns its exit code and output."""

    def run(*argv: str, secret: str = SECRET) -> Ran:
        capsys.readouterr()
        code = main(["keys", *argv, "--keys-secret", secret, "--api-root", google_api.url])
        out = capsys.readouterr()
        return Ran(code, out.out, out.err)

    return run
