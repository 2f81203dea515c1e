"""Credentials that reach the fake the way real ones reach Google.

``user_credentials`` are what ``gcloud auth application-default login`` leaves (a refresh token, a
client, a quota project), with the token endpoint pointed at the fake: google-auth's own refresh then
runs against it (an ADC file of this type always names Google's endpoint, so a test hands the object
to ``google.auth.default``'s caller instead). ``service_account_file`` writes a real key file for
``GOOGLE_APPLICATION_CREDENTIALS``, whose ``token_uri`` google-auth honours.
"""

from __future__ import annotations

import json
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from google.oauth2 import credentials as user

CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"


def user_credentials(
    root: str, *, account: str = "alice@example.com", quota_project: str | None = None
) -> user.Credentials:
    return user.Credentials(
        token=None,
        refresh_token="1//fake-refresh-token",
        token_uri=f"{root}/token",
        client_id="764086051850-fake.apps.googleusercontent.com",
        client_secret="fake-secret",
        scopes=[CLOUD_PLATFORM],
        quota_project_id=quota_project,
        account=account,
    )


def service_account_file(path: Path, root: str, *, project: str, email: str) -> str:
    """Writes a service-account key file whose token endpoint is the fake; returns its public key (PEM)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    info = {
        "type": "service_account",
        "project_id": project,
        "private_key_id": "fake-key-1",
        "private_key": private,
        "client_email": email,
        "client_id": "100000000000000000001",
        "token_uri": f"{root}/token",
    }
    path.write_text(json.dumps(info))
    return public
