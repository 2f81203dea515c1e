"""The two pages the door shows a browser itself: the key page (a navigation without the key) and
the waking page (a navigation while the server boots, which reloads itself)."""

from __future__ import annotations

import html

_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:34rem;margin:12vh auto;padding:0 1rem;color:#222}"
    "input{font-size:1rem;padding:.5rem;width:100%;box-sizing:border-box;margin:.5rem 0}"
    "button{font-size:1rem;padding:.5rem 1.2rem}.err{color:#b00020}"
)


def key_page(message: str = "") -> str:
    note = f'<p class="err">{html.escape(message)}</p>' if message else ""
    return (
        "<!doctype html><html><head><meta charset=utf-8><title>Qwen3.6 endpoint</title>"
        f"<style>{_STYLE}</style></head><body><h1>Qwen3.6 endpoint</h1>"
        "<p>This endpoint needs its API key "
        "(<code>pulumi stack output apiKey --show-secrets</code> prints it).</p>"
        f'{note}<form method="post" action="/_qwen36/login">'
        '<label for="key">API key</label>'
        '<input id="key" name="key" type="password" autocomplete="current-password" autofocus>'
        '<button type="submit">Open the web UI</button></form></body></html>'
    )


def waking_page(seconds: float, refresh_s: int) -> str:
    return (
        "<!doctype html><html><head><meta charset=utf-8>"
        f'<meta http-equiv="refresh" content="{refresh_s}"><title>Waking the server</title>'
        f"<style>{_STYLE}</style></head><body><h1>Waking the server</h1>"
        f"<p>The server was stopped while idle and is starting ({seconds:.0f} s so far; a cold start takes"
        " about two minutes). This page reloads itself and opens the web UI once it is up.</p></body></html>"
    )
