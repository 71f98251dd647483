"""Headless Chromium, driven by selenium through chromedriver, for the browser tests
(tests/host/test_web.py, tests/host/test_websocket_browser.py).

Needs Debian's `chromium` and `chromium-driver` (.ci/run installs them):
without them a test skips, or fails under SISKIN_REQUIRE_ALL=1.
"""

from __future__ import annotations

import shutil
from typing import Any

from tests.conftest import require


def require_chromium() -> tuple[str, str]:
    """(browser, chromedriver) paths; skip or, under SISKIN_REQUIRE_ALL=1, fail when either is missing."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    require("chromium and chromedriver", browser and driver, "apt-get install chromium chromium-driver")
    assert browser is not None and driver is not None
    return browser, driver


def start_chromium(*args: str) -> Any:
    """A headless Chromium's selenium WebDriver (the caller quits it); `args`: more command-line switches."""
    browser, driver = require_chromium()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = browser
    # As root in a container: no sandbox, no GPU, no /dev/shm.
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", *args):
        options.add_argument(arg)
    return webdriver.Chrome(options=options, service=Service(driver))
