"""``qwen36 keys list | add NAME | revoke NAME | rotate NAME [--stack S] [--json]``: the front door's
named keys, without a redeploy.

The set is the Secret Manager secret of the stack output ``keysSecret`` (infra/door_keys.py); each
command reads its latest version and adds a new one with the user's own credentials
(``secretmanager.versions.access`` and ``secretmanager.versions.add``), and the door picks it up within
60 s. Only each key's salted hash is stored: ``add`` and ``rotate`` print the new key once. The
program's key is the key named ``default``; ``rotate default`` replaces it at the door and
``revoke default --force`` disables it there. ``list`` (and ``qwen36 status``) add each key's use from
the door's Cloud Monitoring series (``monitoring.timeSeries.list``). docs/door.md has the format.

Exit codes (docs/development.md): a name that is not in the set 8; a name that already is, 10 (as
Secret Manager answers 409 ALREADY_EXISTS for a taken id); a bad name or ``revoke default`` without
``--force`` 2; a refused permission 6.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from qwen36 import argtypes
from qwen36.errors import ApiError, Exit, NotFoundError, UsageError
from qwen36.keys import keyset as ks
from qwen36.keys.store import KeyStore, parse_secret_name
from qwen36.keys.usage import KeyUsage, Monitoring, key_usage
from qwen36.pulumi_cli import pulumi_stdout

DEFAULT_STACK = "dev"
STACK_OUTPUT = "keysSecret"
CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"
# The door caches the set for at most 30 s (contract A), so an edit is in force within 60 s.
TAKES_EFFECT = "within 60 s"
LIST_LIMIT = argtypes.int_range(1, 1_000_000)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "keys",
        help="list, add, revoke or rotate the front door's named keys (no redeploy)",
        description="The front door's named keys: list, add, revoke and rotate them without a redeploy.",
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--stack", default=DEFAULT_STACK, help=f"the stack (default {DEFAULT_STACK})")
    common.add_argument(
        "--keys-secret",
        help="the key set's secret, projects/<project>/secrets/<id> (instead of the stack's keysSecret)",
    )
    common.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    common.add_argument("--api-root", help=argparse.SUPPRESS)
    verbs = parser.add_subparsers(dest="keys_verb", required=True, metavar="VERB")
    verbs.add_parser("list", parents=[common], help="each key, its limits and its use (day, 30 days)")
    for verb, text in (
        ("add", "make a new key NAME and print it once"),
        ("rotate", "give NAME a new key (the old one stops) and print it once"),
    ):
        sub = verbs.add_parser(verb, parents=[common], help=text)
        sub.add_argument("name", metavar="NAME", help=ks.NAME_RULE)
        sub.add_argument("--concurrent", type=LIST_LIMIT, help="at most this many requests at once")
        sub.add_argument("--tokens-per-minute", type=LIST_LIMIT, help="at most this many tokens a minute")
    revoke = verbs.add_parser("revoke", parents=[common], help="make the door refuse NAME's key")
    revoke.add_argument("name", metavar="NAME", help=ks.NAME_RULE)
    revoke.add_argument(
        "--force", action="store_true", help="needed for `default`, the program's key (the apiKey output)"
    )
    parser.set_defaults(func=run, check=vet)


def vet(args: argparse.Namespace) -> None:
    name = getattr(args, "name", None)
    if name is not None and not ks.valid_name(name):
        raise UsageError(f"the key name {name!r} is not {ks.NAME_RULE}")
    if args.keys_secret:
        parse_secret_name(args.keys_secret)
    if args.keys_verb == "revoke" and name == ks.DEFAULT and not args.force:
        raise UsageError(
            "revoking default refuses the program's key (the apiKey output) at the door, which "
            "`pulumi up`'s gate and `qwen36 wake` use; pass --force to revoke it anyway"
        )


def keys_secret(args: argparse.Namespace) -> str:
    if args.keys_secret:
        return str(args.keys_secret)
    stdout = pulumi_stdout(
        ["stack", "output", "--json", "--stack", args.stack],
        shown=f"pulumi stack output --json --stack {args.stack}",
    )
    try:
        outputs = json.loads(stdout or "{}")
    except json.JSONDecodeError:
        outputs = None
    if not isinstance(outputs, dict):
        raise ApiError(f"`pulumi stack output --json --stack {args.stack}` did not print a JSON object")
    secret = outputs.get(STACK_OUTPUT)
    if not isinstance(secret, str) or not secret:
        raise NotFoundError(
            f"stack {args.stack} has no {STACK_OUTPUT} output (no front door, or deployed before named "
            "keys); run `pulumi up`, or pass --keys-secret"
        )
    return secret


def credentials() -> Any:
    import google.auth

    creds, _ = google.auth.default(scopes=[CLOUD_PLATFORM])
    return creds


def _url(root: str | None, version: str) -> str | None:
    return f"{root.rstrip('/')}/{version}" if root else None


def run(args: argparse.Namespace) -> int:
    secret = keys_secret(args)
    creds = credentials()
    store = KeyStore(secret, creds, _url(args.api_root, "v1"))
    if args.keys_verb == "list":
        return list_keys(args, store, Monitoring(store.project, creds, _url(args.api_root, "v3")))
    if args.keys_verb == "revoke":
        return revoke_key(args, store)
    return new_key(args, store)


def _limits(args: argparse.Namespace, old: ks.Limits | None = None) -> ks.Limits:
    old = old or ks.Limits()
    return ks.Limits(
        concurrent=old.concurrent if args.concurrent is None else args.concurrent,
        tokens_per_minute=old.tokens_per_minute if args.tokens_per_minute is None else args.tokens_per_minute,
    )


def new_key(args: argparse.Namespace, store: KeyStore) -> int:
    name, verb = args.name, args.keys_verb
    key = ks.new_key()
    created = ks.now()

    def change(current: ks.KeySet) -> ks.KeySet:
        entry = current.find(name)
        if verb == "add":
            if entry is not None or name == ks.DEFAULT:
                state = "revoked" if entry is not None and entry.revoked else "in use"
                raise ApiError(
                    f"a key named {name} already exists ({state}) in {store.secret}; pick another name, "
                    f"or `qwen36 keys rotate {name}` for a new key"
                )
            return current.put(ks.make_entry(name, key, created, _limits(args)))
        if entry is None and name != ks.DEFAULT:
            raise NotFoundError(
                f"no key named {name} in {store.secret}; `qwen36 keys list` shows the names, "
                f"`qwen36 keys add {name}` makes one"
            )
        return current.put(ks.make_entry(name, key, created, _limits(args, entry.limits if entry else None)))

    version, written = store.edit(change)
    entry = written.find(name)
    assert entry is not None  # change() put it there
    done = "added" if verb == "add" else "rotated"
    if args.json:
        print(
            json.dumps(
                {
                    "name": name,
                    "key": key,
                    "created": entry.created,
                    "limits": entry.limits.to_json(),
                    "secret": store.secret,
                    "version": version,
                }
            ),
            flush=True,
        )
        return Exit.OK
    print(f"{name}: {done} as version {version} of {store.secret} (limits: {entry.limits.describe()})")
    print(f"{name}: {key}")
    after = "; the old key stops" if verb == "rotate" else ""
    print(f"{name}: the door takes it {TAKES_EFFECT}{after}; the key is shown only this once", flush=True)
    return Exit.OK


def revoke_key(args: argparse.Namespace, store: KeyStore) -> int:
    name = args.name

    def change(current: ks.KeySet) -> ks.KeySet:
        entry = current.find(name)
        if entry is None and name != ks.DEFAULT:
            raise NotFoundError(f"no key named {name} in {store.secret}; `qwen36 keys list` shows the names")
        if entry is not None and entry.revoked:
            return current
        gone = ks.revoked(entry) if entry else ks.Entry(name=name, created=ks.now(), revoked=True)
        return current.put(gone)

    current = store.read()
    entry = current.keyset.find(name)
    if entry is not None and entry.revoked:
        line = f"{name}: already revoked (version {current.number}); nothing written"
        return _say(args, {"name": name, "revoked": True, "version": current.number}, line)
    change(current.keyset)  # a name not in the set fails here, before anything is written
    version, _ = store.edit(change)
    return _say(
        args,
        {"name": name, "revoked": True, "secret": store.secret, "version": version},
        f"{name}: revoked as version {version} of {store.secret}; the door refuses it {TAKES_EFFECT}",
    )


def _say(args: argparse.Namespace, document: dict[str, Any], line: str) -> int:
    print(json.dumps(document) if args.json else line, flush=True)
    return Exit.OK


PROGRAM_KEY = "the program's key (the apiKey output)"


def list_keys(args: argparse.Namespace, store: KeyStore, monitoring: Monitoring) -> int:
    current = store.read()
    used = key_usage(monitoring)
    # (name, state, what it is, limits, created)
    rows: list[tuple[str, str, str, ks.Limits, str | None]] = []
    if current.keyset.find(ks.DEFAULT) is None:
        rows.append((ks.DEFAULT, "active", PROGRAM_KEY, ks.Limits(), None))
    for entry in current.keyset.entries:
        state = "revoked" if entry.revoked else "active"
        rows.append((entry.name, state, f"created {entry.created}", entry.limits, entry.created))
    uses = {name: used.pop(name, KeyUsage()) for name, *_ in rows}
    if args.json:
        keys = [
            {"name": n, "state": s, "created": c, "limits": lim.to_json(), "usage": uses[n].to_json()}
            for n, s, _, lim, c in rows
        ]
        others = {name: u.to_json() for name, u in sorted(used.items())}
        document = {"secret": store.secret, "version": current.number, "keys": keys, "notInTheSet": others}
        return _say(args, document, "")
    print(f"keys: {len(rows)} in {store.secret} (version {current.number or 'none yet'})")
    for name, state, what, limits, _ in rows:
        print(f"{name}: {state}, {what}, limits {limits.describe()}; {uses[name].describe()}")
    # Series of names no longer in the set (or from a door before the key label).
    for name, use in sorted(used.items()):
        print(f"{name}: not in the set; {use.describe()}")
    return Exit.OK
