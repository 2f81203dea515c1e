"""Which key a request came with: the program's key (the key named ``default``) and the named-key set,
read from Secret Manager at runtime and cached, and the session cookies made from them.

Both secrets are read with ``versions/latest:access``
(https://cloud.google.com/secret-manager/docs/reference/rest/v1/projects.secrets.versions/access:
``{"name": ".../versions/N", "payload": {"data": "<base64>", "dataCrc32c": "..."}}``) under the
door's own metadata-server token, not as a Cloud Run secret reference: Cloud Run checks the
secret's ``secretAccessor`` grant when it creates the revision, seconds after the grant was made,
and fails the deploy (terraform-provider-google #16350, #13786, #17245). Read at runtime, a grant
still propagating is only a few refused requests: while the program's key answers 403 or 404 every
keyed request gets a 503 ``door_key_unreadable`` with ``Retry-After`` and ``/health`` stays 200, so
the revision becomes ready.

What is read is kept for at most ``max_age_s`` (30 s, ``MAX_AGE_S``): a request that finds it older
waits for a new read, one past two thirds of it starts one in the background, so a revocation takes
effect within 30 s of its new version and the read is seldom on a request's path. A failed read
keeps the last good one until twice that (a revocation still ends within 60 s), then refuses keyed
requests the same way. The key set with no version yet (404, or 400 FAILED_PRECONDITION when the latest is
disabled or destroyed) is the empty set; a 403 on it or a payload that does not parse also refuses
keyed requests (closed, not open: a revocation in it must not be missed).

A key is recognised by hashing it, once, and looking the digest up among the keys recognised since
the set was last read; a new digest is compared with every live entry (``keyset.match``). So 100
keys cost a request one SHA-256, not 100.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import httpx

from door import auth, keyset
from door.gce import GceError, Metadata

MAX_AGE_S = 30.0
ACCESS_TIMEOUT_S = 10.0
# The cookie names its key and carries an HMAC, under the program's key, of this label, the name and
# the key's hash: never the key, and a cookie of a revoked or rotated key no longer verifies.
_COOKIE_LABEL = b"qwen36-door-session-v2"
_PROGRAM = b"program"

log = logging.getLogger("qwen36.door")


class KeyUnreadable(RuntimeError):
    """The door cannot tell which keys are valid right now."""


class SecretError(RuntimeError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class KeyState:
    program: str
    entries: dict[str, keyset.Entry]
    read_at: float
    known: dict[bytes, str] = field(default_factory=dict)
    """Digests of presented keys already matched against this state, by name."""

    def entry(self, name: str) -> keyset.Entry | None:
        entry = self.entries.get(name)
        if entry is not None:
            return None if entry.revoked else entry
        return keyset.Entry(keyset.DEFAULT) if name == keyset.DEFAULT else None

    def _material(self, name: str) -> bytes | None:
        entry = self.entry(name)
        if entry is None:
            return None
        return entry.digest.hex().encode() if entry.digest else _PROGRAM

    def match(self, key: str) -> str | None:
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
        if digest in self.known:
            return self.known[digest]
        found = keyset.match(self.entries, key)
        program = hmac.compare_digest(digest, hashlib.sha256(self.program.encode()).digest())
        if found is None and program and keyset.DEFAULT not in self.entries:
            found = keyset.DEFAULT
        if found is not None:
            self.known[digest] = found
        return found

    def cookie(self, name: str) -> str:
        material = self._material(name)
        assert material is not None
        return f"{name}.{self._mac(name, material)}"

    def _mac(self, name: str, material: bytes) -> str:
        message = b"\0".join((_COOKIE_LABEL, name.encode(), material))
        return hmac.new(self.program.encode(), message, hashlib.sha256).hexdigest()

    def from_cookie(self, value: str) -> str | None:
        name, _, mac = value.partition(".")
        material = self._material(name) if keyset.NAME.fullmatch(name) else None
        expected = self._mac(name, material or b"none")
        return name if hmac.compare_digest(mac.encode(), expected.encode()) and material else None

    def limits(self, name: str) -> keyset.Limits:
        entry = self.entry(name)
        return entry.limits if entry else keyset.Limits()


class SecretManager:
    def __init__(self, client: httpx.AsyncClient, metadata: Metadata, base_url: str) -> None:
        self.client = client
        self.metadata = metadata
        self.base_url = base_url.rstrip("/")

    async def latest(self, secret: str) -> bytes:
        """The payload of ``secret``'s latest version; ``SecretError`` with the status otherwise."""
        try:
            token = await self.metadata.token()
        except (GceError, httpx.HTTPError, ValueError, KeyError) as exc:
            raise SecretError(0, f"no access token from the metadata server: {exc}") from exc
        url = f"{self.base_url}/{secret}/versions/latest:access"
        try:
            reply = await self.client.get(
                url, headers={"Authorization": f"Bearer {token}"}, timeout=ACCESS_TIMEOUT_S
            )
        except httpx.HTTPError as exc:
            raise SecretError(0, f"{secret}: {type(exc).__name__}") from exc
        if reply.status_code != 200:
            raise SecretError(reply.status_code, f"{secret} answered {reply.status_code}: {reply.text[:200]}")
        try:
            return base64.b64decode(reply.json()["payload"]["data"])
        except (ValueError, KeyError, TypeError) as exc:
            raise SecretError(reply.status_code, f"{secret}: no payload in the answer ({exc})") from exc


class KeyStore:
    def __init__(
        self,
        *,
        plain_key: str,
        key_secret: str,
        set_secret: str,
        secrets: SecretManager | None,
        max_age_s: float = MAX_AGE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_age_s = min(max_age_s, MAX_AGE_S)
        self.plain_key = plain_key
        self.key_secret = key_secret
        self.set_secret = set_secret
        self.secrets = secrets
        self.clock = clock
        self._state: KeyState | None = None
        self._problem = ""
        self._refresh: asyncio.Task[None] | None = None
        if not key_secret and not set_secret:
            self._state = KeyState(plain_key, {}, float("inf"))

    async def _read(self) -> KeyState:
        assert self.secrets is not None
        program = self.plain_key
        if self.key_secret:
            try:
                program = (await self.secrets.latest(self.key_secret)).decode("utf-8").strip()
            except SecretError as exc:
                if exc.status in (403, 404):
                    raise KeyUnreadable(f"the API key's secret is not readable yet ({exc.status})") from exc
                raise KeyUnreadable(f"the API key's secret could not be read: {exc}") from exc
            except UnicodeDecodeError as exc:
                raise KeyUnreadable("the API key's secret is not UTF-8") from exc
        entries: dict[str, keyset.Entry] = {}
        if self.set_secret:
            try:
                entries = keyset.parse(await self.secrets.latest(self.set_secret))
            except SecretError as exc:
                # No version yet: 404 NOT_FOUND, or 400 FAILED_PRECONDITION for a disabled or
                # destroyed latest version (the access method's reference above).
                if exc.status not in (400, 404):
                    raise KeyUnreadable(f"the key set could not be read: {exc}") from exc
            except keyset.KeySetError as exc:
                raise KeyUnreadable(f"the key set does not parse: {exc}") from exc
        if not program:
            raise KeyUnreadable("the API key's secret is empty")
        return KeyState(program, entries, self.clock())

    async def _refresh_now(self) -> None:
        try:
            self._state = await self._read()
            self._problem = ""
        except KeyUnreadable as exc:
            if str(exc) != self._problem:
                log.warning("keys: %s", exc)
            self._problem = str(exc)

    def _start_refresh(self) -> asyncio.Task[None]:
        if self._refresh is None or self._refresh.done():
            self._refresh = asyncio.create_task(self._refresh_now())
        return self._refresh

    async def state(self) -> KeyState:
        state = self._state
        age = self.clock() - state.read_at if state is not None else float("inf")
        if state is not None and age < self.max_age_s * 2 / 3:
            return state
        if state is not None and age < self.max_age_s:
            self._start_refresh()
            return state
        await asyncio.shield(self._start_refresh())
        state = self._state
        if state is not None and self.clock() - state.read_at < 2 * self.max_age_s:
            return state
        raise KeyUnreadable(self._problem or "the keys could not be read")

    async def identify(self, headers: Mapping[str, str]) -> tuple[str, KeyState] | None:
        """The name of the key the request came with (a header or the session cookie) and the keys
        it was checked against, or None. Raises ``KeyUnreadable`` for a request that presents
        something while the keys are unknown."""
        key = auth.presented_key(headers)
        cookie = auth.cookie_from(headers)
        if key is None and cookie is None:
            return None
        state = await self.state()
        name = state.match(key) if key is not None else state.from_cookie(cookie or "")
        return None if name is None else (name, state)
