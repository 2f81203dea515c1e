"""The web UI through the door in headless Chromium (Playwright, Debian's browser): the door's key
page, the key entered once, then the pinned build's own UI served through the door, streaming an
answer. Needs the llama-server build with the UI embedded (``python -m tests.harness.llama_build
--ui``); where it has
not been built on this machine the test skips rather than start a half-hour build."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.door.conftest import API_KEY, WorldFactory
from tests.harness.llama_build import UI_BINARY_ENV, ready_binary, recipe

CHROMIUM = Path(os.environ.get("QWEN36_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
ARTIFACTS = (
    Path(os.environ.get("QWEN36_ARTIFACTS", Path(__file__).resolve().parents[2] / "test-artifacts"))
    / "door-web-ui"
)
STEP_MS = 20_000
ANSWER_MS = 60_000
MESSAGE_BOX = "Type a message..."  # the UI's ChatForm placeholder (tests/client/test_web_ui.py)


def _ui_binary() -> Path | None:
    """The UI build if this machine has one already (never builds it)."""
    if os.environ.get(UI_BINARY_ENV):
        return Path(os.environ[UI_BINARY_ENV])
    return ready_binary(recipe(ui=True))


@pytest.mark.llama
def test_the_web_ui_through_the_door_with_the_key(make_world: WorldFactory) -> None:
    binary = _ui_binary()
    if binary is None or not CHROMIUM.is_file():
        pytest.skip(
            "the llama-server build with the web UI (python -m tests.client.ui_build) or Chromium is missing"
        )
    from playwright.sync_api import expect, sync_playwright

    world = make_world(size=1, binary=binary)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_context(service_workers="block").new_page()
            page.set_default_timeout(STEP_MS)
            chats: list[str] = []
            page.on("request", lambda r: chats.append(r.url) if "/chat/completions" in r.url else None)
            page.goto(f"{world.url}/")
            expect(page.get_by_role("button", name="Open the web UI")).to_be_visible()
            page.locator("#key").fill(API_KEY)
            page.get_by_role("button", name="Open the web UI").click()
            box = page.get_by_role("textbox", name=MESSAGE_BOX)
            # A slow first look at the group shows the waking page, which reloads itself every 5 s.
            expect(box).to_be_visible(timeout=STEP_MS)
            box.click()
            page.keyboard.type("Say a")
            page.keyboard.press("Enter")
            expect(page.get_by_text(re.compile("a{16,}"))).to_be_visible(timeout=ANSWER_MS)
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "streamed-answer.png"), animations="disabled")
            assert chats and all(url.startswith(world.url) for url in chats)
        finally:
            browser.close()
    # Every UI request reached llama-server through the door, with the door's key, never the browser's.
    assert any(path.endswith("/chat/completions") for _, path in world.relay.proxied())


def test_a_browser_without_the_key_gets_the_door_s_key_page(make_world: WorldFactory) -> None:
    """The first visit of the web UI: the door's own key page, with the server left asleep (no
    resize, nothing proxied). Needs Chromium only, no UI build. Its screenshot, with the key typed
    in, is docs/door-key-page.png (copied from test-artifacts/door-web-ui/key-page.png)."""
    if not CHROMIUM.is_file():
        pytest.skip("Chromium is missing")
    from playwright.sync_api import expect, sync_playwright

    world = make_world(size=0)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 640, "height": 300})
            page.set_default_timeout(STEP_MS)
            page.goto(f"{world.url}/")
            expect(page.get_by_role("heading", name="Qwen3.6 endpoint")).to_be_visible()
            expect(page.get_by_text("pulumi stack output apiKey --show-secrets")).to_be_visible()
            page.locator("#key").fill(API_KEY)
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "key-page.png"), animations="disabled")
        finally:
            browser.close()
    assert world.group.resizes() == []
    assert world.relay.proxied() == []
