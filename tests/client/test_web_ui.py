"""The web UI in a real browser: headless Chromium (Debian's package) driven by Playwright.

The page is the pinned build's own UI, embedded in llama-server as on the VM (the suite's one
build, ``tests/harness/llama_build.py``, embeds it when npm is here), served by the default
deployment's argument list with the API key on. What a person does is what the test does: open
``/``, meet the key prompt, enter the key, send a message, watch the answer stream in. Each state
is saved as a screenshot under ``test-artifacts/web-ui/`` and checked not blank.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from PIL import Image, ImageStat
from playwright.sync_api import Browser, Page, Playwright, Request, Response, expect, sync_playwright

from infra.config import StackConfig
from tests.client.conftest import API_KEY, WRONG_KEY, deployed_server_args, local_args
from tests.harness.llama_build import UiBuildError, llama_server_ui_binary
from tests.harness.server import LlamaServer

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("QWEN36_ARTIFACTS", ROOT / "test-artifacts")) / "web-ui"
CHROMIUM = Path(os.environ.get("QWEN36_CHROMIUM", "/usr/bin/chromium"))
INSTALL_HINT = "apt-get install -y chromium (scripts/test.sh does this)"
# scripts/test.sh sets this: where it installed the browser, a missing one is a failure, not a skip.
REQUIRE_ENV = "QWEN36_REQUIRE_BROWSER"
# The flags that work on these machines (no GPU, no sandbox as root, a closed network that
# refuses Chromium's background connections).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
STEP_TIMEOUT_MS = 20_000
ANSWER_TIMEOUT_MS = 60_000
# The tiny model answers "aaaa..." until stopped (the UI sends no max_tokens): this many characters
# in the page is an answer on its way, and it must grow in this many steps before the test stops it.
ANSWER_CHARS = 16
GROWTH_STEPS = 4
# A blank or single-colour page has (almost) no spread of pixel values.
MIN_PIXEL_STDDEV = 8.0
MIN_COLOURS = 16
# The UI's own words (tools/ui/src: api-key-validation.ts, ServerErrorSplash.svelte).
ACCESS_DENIED = "Access denied"
ENTER_KEY = "Enter API Key"
SAVE_KEY = "Save & Retry"
KEY_ACCEPTED = "API key validated successfully"
KEY_REJECTED = "Invalid API key - please check and try again"
MESSAGE_BOX = "Type a message..."  # ChatForm.svelte's placeholder, the box's accessible name
CONFIG_STORAGE_KEY = "LlamaUi.config"  # storage.constants.ts: CONFIG_LOCALSTORAGE_KEY
# Records the longest run of "a" in the page at every DOM change: the answer growing in steps.
RECORD_ANSWER = """
window.__answer = [];
new MutationObserver(() => {
  const runs = (document.body ? document.body.innerText : '').match(/a{4,}/g) || [];
  const longest = Math.max(0, ...runs.map((r) => r.length));
  const seen = window.__answer;
  if (longest !== (seen.length ? seen[seen.length - 1] : 0)) seen.push(longest);
}).observe(document, { subtree: true, childList: true, characterData: true });
"""


def _missing(what: str) -> None:
    if os.environ.get(REQUIRE_ENV):
        pytest.fail(what)
    pytest.skip(what)


@pytest.fixture(scope="module")
def chromium() -> Path:
    """Checked before anything is built or started, so a machine without it skips at once."""
    if not CHROMIUM.is_file():
        _missing(f"headless Chromium not found at {CHROMIUM}: {INSTALL_HINT}")
    return CHROMIUM


@pytest.fixture(scope="module")
def ui_server_bin(chromium: Path) -> Path:
    try:
        return llama_server_ui_binary()
    except UiBuildError as error:
        _missing(str(error))
        raise


@pytest.fixture(scope="module")
def playwright(chromium: Path) -> Iterator[Playwright]:
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="module")
def browser(playwright: Playwright, chromium: Path) -> Iterator[Browser]:
    # Playwright's own browser download cannot be fetched here; Debian's Chromium is used instead.
    browser = playwright.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS)
    yield browser
    browser.close()


@pytest.fixture(scope="module")
def ui_endpoint(endpoint_args: list[str], ui_server_bin: Path) -> Iterator[LlamaServer]:
    with LlamaServer(endpoint_args, binary=ui_server_bin) as srv:
        srv.wait_healthy()
        yield srv


@dataclass
class Traffic:
    """What the page sent and got back, as the server saw it."""

    requests: list[Request] = field(default_factory=list)
    responses: list[Response] = field(default_factory=list)

    def on_request(self, request: Request) -> None:
        self.requests.append(request)

    def on_response(self, response: Response) -> None:
        self.responses.append(response)

    def sent(self, path: str) -> list[Request]:
        return [r for r in self.requests if r.url.split("?")[0].endswith(path)]

    def statuses(self, path: str) -> list[int]:
        return [r.status for r in self.responses if r.url.split("?")[0].endswith(path)]


@pytest.fixture
def page(browser: Browser) -> Iterator[tuple[Page, Traffic]]:
    """A fresh profile each time: no stored key, like a first visit. The UI's service worker (an
    offline cache) is blocked so that every request the page makes reaches the test's listeners."""
    context = browser.new_context(viewport={"width": 1100, "height": 720}, service_workers="block")
    context.add_init_script(RECORD_ANSWER)
    expect.set_options(timeout=STEP_TIMEOUT_MS)
    page = context.new_page()
    page.set_default_timeout(STEP_TIMEOUT_MS)
    traffic = Traffic()
    page.on("request", traffic.on_request)
    page.on("response", traffic.on_response)
    yield page, traffic
    context.close()


def screenshot(page: Page, name: str) -> Path:
    """Saves the page and checks it shows something: a spread of pixel values, not one colour."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    # The UI fades its panels in (Svelte transitions run as Web Animations): finish them first.
    page.screenshot(path=str(path), animations="disabled")
    assert_not_blank(path)
    return path


def assert_not_blank(path: Path) -> None:
    with Image.open(path) as image:
        grey = image.convert("L")
        stddev = ImageStat.Stat(grey).stddev[0]
        colours = len(grey.getcolors(maxcolors=256) or range(256))
    assert stddev >= MIN_PIXEL_STDDEV and colours >= MIN_COLOURS, f"{path} looks blank: {stddev=} {colours=}"


@pytest.mark.parametrize("fill", ["white", "black", (250, 250, 250)])
def test_a_blank_screenshot_is_caught(tmp_path: Path, fill: object) -> None:
    blank = tmp_path / "blank.png"
    Image.new("RGB", (1100, 720), fill).save(blank)  # type: ignore[arg-type]
    with pytest.raises(AssertionError, match="looks blank"):
        assert_not_blank(blank)


def enter_key(page: Page, key: str, shot: str | None = None) -> None:
    page.get_by_role("button", name=ENTER_KEY).click()
    page.locator("#api-key-input").fill(key)
    if shot:
        screenshot(page, shot)
    page.get_by_role("button", name=SAVE_KEY).click()


@pytest.mark.llama
def test_key_prompt_then_streamed_answer(ui_endpoint: LlamaServer, page: tuple[Page, Traffic]) -> None:
    pg, traffic = page
    pg.goto(f"{ui_endpoint.base_url}/")
    # The UI's assets load without the key; its first API call does not, and it says so.
    expect(pg.get_by_text(ACCESS_DENIED)).to_be_visible()
    expect(pg.get_by_role("button", name=ENTER_KEY)).to_be_visible()
    assert 401 in traffic.statuses("/props")
    assert all(r.status == 200 for r in traffic.responses if "/_app/" in r.url), "UI assets must be public"
    screenshot(pg, "1-key-required")

    enter_key(pg, API_KEY, shot="2-key-entry")
    expect(pg.get_by_text(KEY_ACCEPTED)).to_be_visible()
    # The UI shows the success for a second, then opens the chat.
    expect(pg.get_by_text(ACCESS_DENIED)).to_be_hidden()
    textbox = pg.get_by_role("textbox", name=MESSAGE_BOX)
    expect(textbox).to_be_visible()
    # Where the UI keeps the key: its settings in the browser's localStorage ...
    stored = json.loads(pg.evaluate(f"localStorage.getItem('{CONFIG_STORAGE_KEY}')"))
    assert stored["apiKey"] == API_KEY

    textbox.click()
    pg.keyboard.type("Say a")
    pg.keyboard.press("Enter")
    answer = pg.get_by_text(re.compile(f"a{{{ANSWER_CHARS},}}"))
    expect(answer).to_be_visible(timeout=ANSWER_TIMEOUT_MS)
    # Streamed into the page: the answer, which never ends by itself, grows in steps while it is
    # generated (a UI that waited for the whole answer would show none of it).
    pg.wait_for_function(f"window.__answer.length >= {GROWTH_STEPS}", timeout=ANSWER_TIMEOUT_MS)
    grew = pg.evaluate("window.__answer")
    pg.get_by_role("button", name="Stop", exact=True).click()
    assert grew == sorted(set(grew)), grew
    screenshot(pg, "3-streamed-answer")

    # ... and where it sends it: a bearer token on the chat request, which asks for a stream.
    chat = traffic.sent("/v1/chat/completions")[0]
    assert chat.headers.get("authorization") == f"Bearer {API_KEY}"
    body = json.loads(chat.post_data or "{}")
    assert body["stream"] is True
    # The UI's own default (Settings > Sampling & Penalties > Backend sampling, off) overrides the
    # server's --backend-sampling for its chats: docs/reaching.md tells UI users to tick it.
    assert "--backend-sampling" in ui_endpoint.args and body["backend_sampling"] is False
    assert chat.response() is not None
    assert "text/event-stream" in chat.response().headers["content-type"]  # type: ignore[union-attr]


@pytest.mark.llama
def test_wrong_key_shows_the_auth_error(ui_endpoint: LlamaServer, page: tuple[Page, Traffic]) -> None:
    pg, traffic = page
    pg.goto(f"{ui_endpoint.base_url}/")
    enter_key(pg, WRONG_KEY)
    expect(pg.get_by_text(KEY_REJECTED)).to_be_visible()
    assert traffic.sent("/props")[-1].headers.get("authorization") == f"Bearer {WRONG_KEY}"
    assert traffic.statuses("/props")[-1] == 401
    screenshot(pg, "4-wrong-key")

    # The wrong key is kept; a reload shows the key prompt again, not an empty page or a spinner.
    pg.reload()
    expect(pg.get_by_text(ACCESS_DENIED)).to_be_visible()
    expect(pg.get_by_role("button", name=ENTER_KEY)).to_be_visible()
    screenshot(pg, "5-wrong-key-reload")


@pytest.mark.llama
def test_the_prompt_check_fails_when_the_key_is_off(
    tiny_mtp_model_agreeing: Path, key_file: Path, ui_server_bin: Path, page: tuple[Page, Traffic]
) -> None:
    """The argument list with the key turned off gives an open UI, which the tests above reject."""
    args = local_args(
        deployed_server_args(StackConfig(api_key=False, door=False)),
        model=tiny_mtp_model_agreeing,
        key_file=key_file,
    )
    assert "--api-key-file" not in args
    pg, traffic = page
    with LlamaServer(args, binary=ui_server_bin) as srv:
        srv.wait_healthy()
        pg.goto(f"{srv.base_url}/")
        expect(pg.get_by_role("textbox", name=MESSAGE_BOX)).to_be_visible()
        assert pg.get_by_text(ACCESS_DENIED).count() == 0
        assert set(traffic.statuses("/props")) == {200}
